package store

import (
	"context"
	"sync"
	"syscall"
)

// segCache keeps the segments Top maps, and what it learnt of them, from
// one query of a Reader to the next: a segment file never changes once
// written, so its mapping, the CRCs of its blocks and the global ids of
// its addresses and of its records' flows stay true for as long as it is
// live. A warm Top then neither maps, faults in nor checksums anything
// again, nor looks up an address dictionary entry or a flow key it looked
// up before (the web UI asks the same Reader over and over; `loupe top`
// runs one query and gains nothing).
//
// A cached segment is found by its id and taken only if the file opened
// for this query is the very one it was mapped from, unchanged: the same
// inode, size, modification and change times. A file rewritten in place
// (the writer never does that) is mapped and verified afresh. Segments
// the manifest no longer lists are dropped, and unmapped once no query
// reads them.
type segCache struct {
	mu    sync.Mutex
	segs  map[uint64]*cachedSeg
	in    *interner // the canonical addresses' global ids (interner.remapOf)
	raw   *interner // the addresses as stored, the flow keys' (interner.rawOf)
	flows *flowIDs  // the flows' ids (flowIDs.idsOf), of keys that hold raw's ids
	// addrs is the address entries of the cached segments, a bound of the
	// live addresses: an interner far bigger holds mostly addresses of
	// deleted segments, and is replaced. records bounds the live flows
	// as addrs the addresses.
	addrs, records int
}

type cachedSeg struct {
	s     *segment
	ident fileIdent
	refs  int  // queries reading it
	gone  bool // out of the cache: unmapped when refs drops to 0
}

// fileIdent says which file, in which state, a segment was mapped from.
type fileIdent struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func identOf(sf snapFile) (fileIdent, bool) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(sf.f.Fd()), &st); err != nil {
		return fileIdent{}, false
	}
	return fileIdent{uint64(st.Dev), st.Ino, st.Size, st.Mtim, st.Ctim}, true
}

// interners returns the interners queries starting now share, of
// canonical addresses and of flows (with the addresses as stored that
// their keys hold), each replaced by an empty one when it holds over
// twice the addresses the cached segments have, or the flows their
// records can be (and more than 64 Ki).
func (c *segCache) interners() (canon *interner, flows *flowIDs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := 2 * max(c.addrs, 1<<16)
	if c.in == nil || c.in.size() > limit {
		c.in = &interner{}
	}
	if c.raw == nil || c.raw.size() > limit {
		c.raw = &interner{}
	}
	if c.flows == nil || c.flows.raw != c.raw || c.flows.size() > 2*max(c.records, 1<<16) {
		c.flows = newFlowIDs(c.raw)
	}
	return c.in, c.flows
}

// acquire returns the mapped segment of sf, from the cache or mapped now
// (its header checked, its blocks verified as queries use them). The
// caller releases it.
func (c *segCache) acquire(sf snapFile) (*cachedSeg, error) {
	id, ok := identOf(sf)
	c.mu.Lock()
	if cs := c.segs[sf.e.id]; ok && cs != nil && cs.ident == id &&
		uint64(cs.s.n) == sf.e.records && int64(len(cs.s.data)) == sf.e.size {
		cs.refs++
		c.mu.Unlock()
		return cs, nil
	}
	c.mu.Unlock()
	s, err := mapFile(sf, false)
	if err != nil {
		return nil, err
	}
	cs := &cachedSeg{s: s, ident: id, refs: 1}
	if !ok {
		cs.gone = true // not comparable later: used by this query alone
		return cs, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.segs == nil {
		c.segs = make(map[uint64]*cachedSeg)
	}
	if old := c.segs[sf.e.id]; old != nil {
		c.dropLocked(sf.e.id, old)
	}
	c.segs[sf.e.id] = cs
	c.addrs += s.nAddr
	c.records += s.n
	return cs, nil
}

func (c *segCache) release(cs *cachedSeg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs.refs--
	if cs.gone && cs.refs == 0 {
		cs.s.release()
	}
}

// retain drops the segments not in live (the manifest's ids).
func (c *segCache) retain(live map[uint64]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, cs := range c.segs {
		if !live[id] {
			c.dropLocked(id, cs)
		}
	}
}

// close drops every segment (unmapped now, or by the last query reading
// it) and the interners: a Reader used again after Close starts afresh.
func (c *segCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, cs := range c.segs {
		c.dropLocked(id, cs)
	}
	c.in, c.raw, c.flows = nil, nil, nil
}

func (c *segCache) dropLocked(id uint64, cs *cachedSeg) {
	delete(c.segs, id)
	c.addrs -= cs.s.nAddr
	c.records -= cs.s.n
	cs.gone = true
	if cs.refs == 0 {
		cs.s.release()
	}
}

// querySegs are the segments one Top reads, acquired once for all its
// passes.
type querySegs struct {
	c    *segCache
	segs map[uint64]*cachedSeg
}

// acquireAll acquires the segments of files; those that cannot be mapped
// or whose header is damaged are reported to rep and left out.
func (r *Reader) acquireAll(sn *snapshot, files []snapFile, rep *Report) (*querySegs, error) {
	r.cache.retain(sn.live)
	qs := &querySegs{c: r.cache, segs: make(map[uint64]*cachedSeg, len(files))}
	var mu sync.Mutex
	for _, sf := range files {
		cs, err := r.cache.acquire(sf)
		switch {
		case damaged(err):
			r.skip(rep, &mu, sf.path, err)
		case err != nil:
			qs.release()
			return nil, err
		default:
			qs.segs[sf.e.id] = cs
		}
	}
	return qs, nil
}

func (qs *querySegs) release() {
	for _, cs := range qs.segs {
		qs.c.release(cs)
	}
	qs.segs = nil
}

// parallelSegs is parallelIn over segments already mapped: fn runs on
// each of files that qs holds, on up to GOMAXPROCS goroutines, in order.
func (r *Reader) parallelSegs(ctx context.Context, qs *querySegs, files []snapFile, rep *Report, fn func(w int, s *segment) error) error {
	workers := min(maxWorkers(), max(len(files), 1))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next int
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(files) {
					return
				}
				sf := files[i]
				cs := qs.segs[sf.e.id]
				if cs == nil {
					continue // skipped and reported when acquired
				}
				err := fn(w, cs.s)
				switch {
				case err == nil:
					mu.Lock()
					rep.Read++
					rep.Scanned += uint64(cs.s.n)
					mu.Unlock()
				case damaged(err):
					r.skip(rep, &mu, sf.path, err)
				default:
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}
