package store

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"loupe/internal/flow"
)

// Traffic sums the records of a query by interface, direction and second
// of last_seen, and by protocol: what `loupe traffic` and the UI's
// Overview draw, read from the columns it needs alone, in parallel, from
// the segments the Reader keeps mapped (as Top), rather than each record
// decoded in turn (Scan), which took seconds over 10 million records.

// Volume is what some records carried, and how many records they are.
type Volume struct {
	Bytes, Packets, Records uint64
}

func (v *Volume) merge(o *Volume) {
	v.Bytes += o.Bytes
	v.Packets += o.Packets
	v.Records += o.Records
}

// TrafficPoint is the volume of one interface and direction in one
// second: the records whose last_seen is in it.
type TrafficPoint struct {
	Iface     string
	Direction flow.Direction
	// Sec is the second, in Unix seconds (time.Time.Unix of last_seen).
	Sec int64
	Volume
}

// TrafficSums is the answer of Traffic.
type TrafficSums struct {
	// Points are ordered by interface, direction and second; seconds
	// without a record are left out.
	Points []TrafficPoint
	// Protos are the volumes by IP protocol.
	Protos [256]Volume
	Total  Volume
	// Oldest is the earliest first_seen of a matching record (zero if
	// none matched).
	Oldest time.Time
}

// Traffic returns the sums of the records matching q, and sets q.Report's
// Matched to their number.
func (r *Reader) Traffic(ctx context.Context, q Query) (TrafficSums, error) {
	cq, err := q.compile()
	if err != nil {
		return TrafficSums{}, err
	}
	rep := q.report()
	sn, err := r.snapshot(ctx, cq.since, cq.until, rep)
	if err != nil {
		return TrafficSums{}, err
	}
	defer sn.close()
	files := slices.Clone(sn.files)
	slices.SortFunc(files, func(a, b snapFile) int { return cmp.Compare(b.e.size, a.e.size) })
	segs, err := r.acquireAll(sn, files, rep)
	if err != nil {
		return TrafficSums{}, err
	}
	defer segs.release()
	ws := make([]*trafficWorker, maxWorkers())
	for i := range ws {
		ws[i] = &trafficWorker{cq: &cq, oldest: math.MaxInt64, points: map[pointKey]*Volume{}}
	}
	err = r.parallelSegs(ctx, segs, files, rep, func(w int, s *segment) error { return ws[w].segment(s) })
	if err != nil {
		return TrafficSums{}, err
	}
	var out TrafficSums
	points := map[pointKey]*Volume{}
	oldest := int64(math.MaxInt64)
	for _, w := range ws {
		out.Total.merge(&w.total)
		for p := range w.protos {
			out.Protos[p].merge(&w.protos[p])
		}
		oldest = min(oldest, w.oldest)
		for k, v := range w.points {
			if t := points[k]; t != nil {
				t.merge(v)
			} else {
				points[k] = v
			}
		}
	}
	if out.Total.Records > 0 {
		out.Oldest = time.Unix(0, oldest)
	}
	out.Points = make([]TrafficPoint, 0, len(points))
	for k, v := range points {
		out.Points = append(out.Points, TrafficPoint{Iface: k.iface, Direction: k.dir, Sec: k.sec, Volume: *v})
	}
	slices.SortFunc(out.Points, func(a, b TrafficPoint) int {
		return cmp.Or(cmp.Compare(a.Iface, b.Iface), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Sec, b.Sec))
	})
	rep.Matched = out.Total.Records
	return out, nil
}

// pointKey is a TrafficPoint's key.
type pointKey struct {
	iface string
	dir   flow.Direction
	sec   int64
}

// denseSpan bounds the seconds a segment's records may span for its sums
// to go through an array (of that many volumes per interface and
// direction): a segment of evictions over a few minutes, as the agent
// writes and compacts them. A segment that spans more is summed through
// the worker's map, a lookup per record.
const denseSpan = 1 << 12

// trafficWorker is one goroutine of Traffic.
type trafficWorker struct {
	cq     *compiled
	total  Volume
	protos [256]Volume
	oldest int64 // ns
	points map[pointKey]*Volume

	// Per segment: per interface entry and direction (0, 1), its series
	// in cells, or -1; the series' keys; a volume per series and second
	// from base.
	slotOf []int32
	series []pointKey
	cells  []Volume
}

// segment adds the records of s that match.
func (w *trafficWorker) segment(s *segment) error {
	f, ok, err := w.cq.forSegment(s)
	if err != nil || !ok {
		return err
	}
	if err := s.verify(cFirst, cLast, cBytes, cPackets, cIface, bNames, cDirection, cProto); err != nil {
		return err
	}
	names, err := s.nameDict()
	if err != nil {
		return err
	}
	if err := s.checkIndex(cIface, len(names)); err != nil {
		return err
	}
	c := &s.cols
	first, last, bytes, packets := c[cFirst], c[cLast], c[cBytes], c[cPackets]
	ifaceCol, dirCol, protoCol := c[cIface], c[cDirection], c[cProto]
	base := floorSec(s.minLast)
	span := floorSec(s.maxLast) - base + 1
	dense := span > 0 && span <= denseSpan
	w.slotOf = slices.Grow(w.slotOf[:0], 2*len(names))[:2*len(names)]
	for i := range w.slotOf {
		w.slotOf[i] = -1
	}
	w.series, w.cells = w.series[:0], w.cells[:0]
	simple := f.simple()
	for i := range s.n {
		if !simple && !f.match(s, i) {
			continue
		}
		b, p := le.Uint64(bytes[8*i:]), le.Uint64(packets[8*i:])
		proto := protoCol[i]
		w.total.Bytes, w.total.Packets, w.total.Records = w.total.Bytes+b, w.total.Packets+p, w.total.Records+1
		pv := &w.protos[proto]
		pv.Bytes, pv.Packets, pv.Records = pv.Bytes+b, pv.Packets+p, pv.Records+1
		w.oldest = min(w.oldest, int64(le.Uint64(first[8*i:])))
		sec := floorSec(int64(le.Uint64(last[8*i:])))
		iface, dir := le.Uint32(ifaceCol[4*i:]), dirCol[i]
		var v *Volume
		if off := sec - base; dense && dir <= 1 && off >= 0 && off < span {
			at := 2*int(iface) + int(dir)
			slot := w.slotOf[at]
			if slot < 0 {
				slot = int32(len(w.series))
				w.slotOf[at] = slot
				w.series = append(w.series, pointKey{iface: names[iface], dir: flow.Direction(dir)})
				w.cells = append(w.cells, make([]Volume, span)...)
			}
			v = &w.cells[int64(slot)*span+off]
		} else {
			// A wide segment, a direction of its own, or a time past
			// the segment's bounds: the map.
			k := pointKey{iface: names[iface], dir: flow.Direction(dir), sec: sec}
			if v = w.points[k]; v == nil {
				v = &Volume{}
				w.points[k] = v
			}
		}
		v.Bytes, v.Packets, v.Records = v.Bytes+b, v.Packets+p, v.Records+1
	}
	for slot, k := range w.series {
		for off, v := range w.cells[int64(slot)*span : int64(slot+1)*span] {
			if v.Records == 0 {
				continue
			}
			k.sec = base + int64(off)
			if t := w.points[k]; t != nil {
				t.merge(&v)
			} else {
				w.points[k] = &v
			}
		}
	}
	return nil
}

// floorSec is the Unix second of a time in ns, as time.Time.Unix says it.
func floorSec(ns int64) int64 {
	sec := ns / 1e9
	if ns%1e9 < 0 {
		sec--
	}
	return sec
}
