package store

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
)

// Retention reasons, the values of Stats.Retention's keys.
const (
	RetentionAge  = "age"
	RetentionSize = "size"
)

// expiredEntry is a segment retention deleted, and why.
type expiredEntry struct {
	entry
	reason string
}

// expire removes from m the segments retention no longer keeps, by age and
// then by size, and returns them; s.mu must be held.
func (s *Store) expire(m *manifest) []expiredEntry {
	var gone []expiredEntry
	if s.opts.Retention > 0 {
		cutoff := timeNS(s.opts.Now().Add(-s.opts.Retention))
		m.entries = slices.DeleteFunc(m.entries, func(e entry) bool {
			if e.maxLast < cutoff {
				gone = append(gone, expiredEntry{e, RetentionAge})
				return true
			}
			return false
		})
	}
	if s.opts.MaxSize <= 0 {
		return gone
	}
	var total int64
	for _, e := range m.entries {
		total += e.size
	}
	if total <= s.opts.MaxSize {
		return gone
	}
	// Oldest first: by newest record, the order age retention follows.
	byAge := slices.Clone(m.entries)
	slices.SortFunc(byAge, func(a, b entry) int { return cmp.Or(cmp.Compare(a.maxLast, b.maxLast), cmp.Compare(a.id, b.id)) })
	drop := make(map[uint64]bool)
	for _, e := range byAge[:len(byAge)-1] {
		if total <= s.opts.MaxSize {
			break
		}
		drop[e.id] = true
		total -= e.size
		gone = append(gone, expiredEntry{e, RetentionSize})
	}
	m.entries = slices.DeleteFunc(m.entries, func(e entry) bool { return drop[e.id] })
	return gone
}

// countExpired adds what retention deleted to the counters; s.mu must be
// held.
func (s *Store) countExpired(gone []expiredEntry) {
	for _, e := range gone {
		d := s.count.Retention[e.reason]
		d.Segments++
		d.Records += e.records
		d.Bytes += uint64(e.size)
		s.count.Retention[e.reason] = d
	}
}

func (s *Store) applyRetention() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	next := s.m.clone()
	expired := s.expire(next)
	if len(expired) == 0 {
		s.mu.Unlock()
		return nil
	}
	err := s.publish(next)
	published := s.m == next
	if published {
		s.countExpired(expired)
	}
	s.mu.Unlock()
	if published {
		s.removeExpired(expired)
	}
	if err != nil {
		return fmt.Errorf("store: apply retention: %w", err)
	}
	return nil
}

func (s *Store) removeExpired(gone []expiredEntry) {
	if len(gone) == 0 {
		return
	}
	es := make([]entry, len(gone))
	var recs uint64
	var bytes int64
	for i, e := range gone {
		es[i] = e.entry
		recs += e.records
		bytes += e.size
	}
	s.removeSegments(es, "retention")
	s.log.Info("retention deleted segments", "segments", len(gone), "records", recs, "bytes", bytes,
		"reason", gone[0].reason, "retention", s.opts.Retention, "max_size", s.opts.MaxSize)
}

// removeSegments unlinks segments already dropped from the manifest. A
// failure only leaves an orphan that the next Open removes.
func (s *Store) removeSegments(es []entry, why string) {
	for _, e := range es {
		err := s.dir.remove(segName(e.id))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("could not remove segment", "segment", segName(e.id), "reason", why, "err", err)
			continue
		}
		s.log.Debug("segment removed", "segment", segName(e.id), "reason", why, "records", e.records)
	}
}
