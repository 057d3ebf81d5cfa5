package store

// Compaction is size-tiered: segments are grouped by size tier (powers of 8
// records), and CompactFanIn segments of one tier that are adjacent in time
// merge into one of the next tier. A record is therefore rewritten about
// log_8(CompactMaxRecords / batch size) times, and the number of files stays
// around FanIn per tier per CompactMaxSpan of data, whatever the write rate.
//
// A merge is crash-safe and never double counts because the manifest, not
// the directory, says what is live: the merged segment is written and
// renamed into place first (an orphan if we crash now: the next Open deletes
// it), then one manifest publish swaps the inputs for it atomically, and only
// then are the inputs unlinked (orphans if we crash now: the next Open
// deletes them). The merged segment's header also lists the ids it replaces,
// so that even rebuilding a lost manifest from the files cannot count both.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/bits"
	"slices"
)

func tier(records uint64) int { return bits.Len64(records) / 3 }

// span is the width of [lo, hi] in nanoseconds without overflowing.
func span(lo, hi int64) uint64 {
	if hi < lo {
		return 0
	}
	return uint64(hi) - uint64(lo)
}

// pickMerge chooses the next merge: the first run, in time order, of
// same-tier segments that is FanIn long or that stops short only because the
// next segment would exceed CompactMaxRecords. It returns nil when no merge
// is due.
func (s *Store) pickMerge() ([]entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	maxRec := uint64(s.opts.CompactMaxRecords)
	maxSpan := uint64(s.opts.CompactMaxSpan)
	fanIn := s.opts.CompactFanIn
	maxBytes := int64(math.MaxInt64)
	if s.opts.MaxSize > 0 {
		maxBytes = s.opts.MaxSize / 8
	}
	tiers := make(map[int][]entry)
	for _, e := range s.m.entries {
		if e.records < maxRec && e.size < maxBytes && !s.bad[e.id] {
			t := tier(e.records)
			tiers[t] = append(tiers[t], e)
		}
	}
	order := make([]int, 0, len(tiers))
	for t := range tiers {
		order = append(order, t)
	}
	slices.Sort(order)
	for _, t := range order {
		segs := tiers[t]
		slices.SortFunc(segs, func(a, b entry) int {
			if a.minFirst != b.minFirst {
				if a.minFirst < b.minFirst {
					return -1
				}
				return 1
			}
			if a.id < b.id {
				return -1
			}
			return 1
		})
		for i := range segs {
			sum, size, lo, hi := uint64(0), int64(0), segs[i].minFirst, segs[i].maxLast
			j, capped := i, false
			for j < len(segs) && j-i < fanIn {
				e := segs[j]
				nlo, nhi := min(lo, e.minFirst), max(hi, e.maxLast)
				if sum+e.records > maxRec || size+e.size > maxBytes {
					capped = true
					break
				}
				if span(nlo, nhi) > maxSpan {
					break
				}
				sum, size, lo, hi = sum+e.records, size+e.size, nlo, nhi
				j++
			}
			if j-i == fanIn || (capped && j-i >= 2) {
				return slices.Clone(segs[i:j]), nil
			}
		}
	}
	return nil, nil
}

// quarantine drops a damaged segment from the manifest and sets its file
// aside, so that readers stop meeting it. If the publish fails, the
// segment stays listed but is never picked for a merge again.
func (s *Store) quarantine(e entry, cause error) {
	s.mu.Lock()
	if !s.m.has(e.id) {
		s.mu.Unlock()
		return // retention or another merge got there first
	}
	next := s.m.clone()
	next.entries = slices.DeleteFunc(next.entries, func(x entry) bool { return x.id == e.id })
	err := s.publish(next)
	published := s.m == next
	if published {
		s.setAside(e.id, e.records, cause)
	} else {
		s.bad[e.id] = true
	}
	s.mu.Unlock()
	if !published {
		s.log.Error("segment is damaged and could not be dropped from the manifest; compaction leaves it alone, readers skip and report it",
			"segment", segName(e.id), "err", cause, "publish_err", err)
	}
}

// merge compacts inputs into one new segment. It returns nil without doing
// anything if an input turned out corrupt or missing (marked bad, so the
// next pick differs) or was expired by retention meanwhile.
func (s *Store) merge(ctx context.Context, inputs []entry) error {
	// In id order, which is write order: a merged segment's records are
	// in the order they were written, and a reader following the store
	// (Reader.Follow) can tell where a segment it never saw lies inside
	// the merge that replaced it.
	inputs = slices.Clone(inputs)
	slices.SortFunc(inputs, func(a, b entry) int { return cmp.Compare(a.id, b.id) })
	var segs []*segment
	defer func() {
		for _, sg := range segs {
			sg.release()
		}
	}()
	var total uint64
	var replaces []uint64
	for _, e := range inputs {
		path := s.dir.join(segName(e.id))
		f, err := openSegment(s.dir, e.id)
		if errors.Is(err, fs.ErrNotExist) {
			// Unless retention raced us (quarantine then does nothing),
			// the file vanished behind the writer's back: drop it, or
			// we would pick it again and spin.
			s.quarantine(e, fmt.Errorf("segment %s: %w", path, err))
			return nil
		}
		var sg *segment
		if err == nil {
			sg, err = mapSegment(f, path, true)
			f.Close()
		}
		if err == nil && (sg.id != e.id || uint64(sg.n) != e.records) {
			sg.release()
			err = corruptf(path, "header (id %d, %d records) does not match the manifest (id %d, %d records)",
				sg.id, sg.n, e.id, e.records)
		}
		if damaged(err) {
			s.quarantine(e, err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("store: compaction: %w", err)
		}
		segs = append(segs, sg)
		total += e.records
		replaces = append(replaces, e.id)
		replaces = append(replaces, sg.replaces...)
	}
	b := newBatch(int(total))
	for i, sg := range segs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.appendSegment(sg); err != nil {
			if errors.Is(err, ErrCorrupt) {
				s.quarantine(inputs[i], err)
				return nil
			}
			return fmt.Errorf("store: compaction: %w", err)
		}
		// Unmap each input once copied: only one input's pages count
		// against the agent's memory at a time.
		sg.release()
		segs[i] = nil
	}
	segs = nil
	slices.Sort(replaces)
	replaces = slices.Compact(replaces)

	id, err := s.allocID()
	if err != nil {
		return err
	}
	out, err := writeSegment(s.dir, id, replaces, b)
	if err != nil {
		return fmt.Errorf("store: compaction: %w", err)
	}
	s.mu.Lock()
	for _, e := range inputs {
		if !s.m.has(e.id) {
			s.mu.Unlock()
			s.dir.remove(segName(id))
			return nil
		}
	}
	next := s.m.clone()
	next.entries = slices.DeleteFunc(next.entries, func(e entry) bool {
		return slices.ContainsFunc(inputs, func(in entry) bool { return in.id == e.id })
	})
	next.entries = append(next.entries, out)
	err = s.publish(next)
	published := s.m == next
	if published {
		s.count.Compactions++
		s.count.MergedSegments += uint64(len(inputs))
	}
	s.mu.Unlock()
	if !published {
		s.dir.remove(segName(id))
		return fmt.Errorf("store: compaction: %w", err)
	}
	s.log.Debug("segments merged", "inputs", len(inputs), "records", out.records, "segment", segName(id))
	s.removeSegments(inputs, "merged")
	if err != nil {
		return fmt.Errorf("store: compaction: %w", err)
	}
	return nil
}
