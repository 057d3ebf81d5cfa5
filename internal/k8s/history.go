package k8s

import (
	"math"
	"slices"
	"sync"
	"time"
)

// source is where a span comes from. Its order is the precedence among
// spans that cover the same address at the same time: a node's address is
// a node's even when a hostNetwork pod's endpoint lists it; this node's own
// pods (with their workloads) come before what EndpointSlices say of pods.
type source uint8

const (
	srcNode source = iota
	srcPod
	srcEndpoint
	srcService
)

// group is the set of sources whose holders exclude one another: an
// address is one pod's at a time (whether a pod or an EndpointSlice says
// so), one service's, one node's.
func (s source) group() source {
	if s == srcEndpoint {
		return srcPod
	}
	return s
}

// open is the end of a span whose holder still holds the address.
const open = math.MaxInt64

// owner is what a span names. Spans of one object share it, and a change of
// names (a pod's workload learnt late) replaces it whole, so a reader never
// sees half of an update.
type owner struct {
	names Names
	// who identifies the holder for the exclusion rule: two spans with the
	// same who name the same pod (or service, or node), even when they come
	// from different objects (a pod and the EndpointSlices that list it).
	who string
	// ports are the endpoint's ports, for choosing among the services a pod
	// is an endpoint of (srcEndpoint only).
	ports []portProto
}

// portProto is a port with its IP protocol number.
type portProto struct {
	port  uint16
	proto uint8
}

// span says that an owner held an address from from (inclusive) to to
// (exclusive), both in Unix nanoseconds.
type span struct {
	from, to int64
	src      source
	// claimed is the claim the span was opened with (claim.claimed).
	claimed int64
	// holder is the key of the object that opened the span ("pod/UID"),
	// which alone closes it.
	holder string
	owner  *owner
}

func (s *span) covers(t int64) bool { return s.from <= t && t < s.to }

// history is, for each key (an address, or a node port), the spans of its
// holders: the current ones and those that ended less than keep ago. It is
// safe for concurrent use; lookups take a read lock only.
type history[K comparable] struct {
	keep     int64 // nanoseconds an ended span is kept
	maxSpans int   // spans kept per key; the oldest ended ones go first

	mu      sync.RWMutex
	spans   map[K][]span
	count   int    // spans in the map
	dropped uint64 // ended spans dropped to stay under maxSpans
}

func newHistory[K comparable](keep time.Duration, maxSpans int) *history[K] {
	return &history[K]{keep: int64(keep), maxSpans: maxSpans, spans: map[K][]span{}}
}

// claim is what an opening holder says of the time it took the address.
type claim struct {
	// seen is when the event that showed it holding the address arrived.
	seen int64
	// claimed is the second (a Kubernetes timestamp's precision) in which
	// the holder itself says it took the address, 0 if it does not say.
	// For a pod, the time its sandbox's network was ready.
	claimed int64
	// notBefore is a time before which the holder cannot have held the
	// address (its creation), 0 if unknown.
	notBefore int64
}

// start decides when a new holder of an address begins to name it, and
// cuts the other holders' spans that it shows to have ended: an address is
// one holder's at a time (within a group), so whatever another span says
// past the new holder's claim is stale.
//
// The true boundary lies between the previous holder's release and the
// new holder's claim, neither of which the API states to better than a
// second, and which the informers report late (a deletion seen at the end
// of an outage, a pod object removed after its sandbox and its IP were
// already gone). The rule keeps the previous holder's traffic from ever
// being named after the new one:
//
//   - A holder that states its claim (a pod: the second in which its
//     network became ready) took the address before the end of that
//     second and before the event that showed it. Other spans are cut
//     there, at the earliest time known to follow the claim; the new span
//     begins at the claim, or at the last end of another holder if later.
//   - A holder that does not (an EndpointSlice's endpoint, a service, a
//     node) is known to hold the address from the event on. Holders that
//     still have it are cut there and the new span begins there. When
//     every other holder had ended, the address was free meanwhile, so the
//     new span is backdated to the last end, or to the holder's creation
//     if later (or if there is no previous holder at all).
//
// The new holder's traffic between its real claim and that boundary (less
// than a second, or the event's delay) is named after the old one, or
// after no one.
func (h *history[K]) start(list []span, group source, who string, c claim) int64 {
	other := func(s *span) bool { return s.src.group() == group && s.owner.who != who }
	cut := c.seen
	if c.claimed != 0 {
		cut = min(c.seen, c.claimed+int64(time.Second))
	}
	var lastEnd int64
	var displaced bool
	for i := range list {
		s := &list[i]
		if !other(s) {
			continue
		}
		// Without a claim only a holder that still has the address is
		// cut: one that ended before the event was seen to end. A span
		// that begins after the cut is a later holder's (this event is
		// the stale one): both stay, and the later one wins from its
		// start, as the latest to begin.
		if s.to > cut && s.from < cut && (c.claimed != 0 || s.to == open) {
			s.to = max(s.from, cut)
			displaced = true
		}
		if s.to != open {
			lastEnd = max(lastEnd, s.to)
		}
	}
	switch {
	case displaced && c.claimed == 0:
		return cut
	case c.claimed != 0:
		return min(max(c.claimed, lastEnd), cut)
	case c.notBefore != 0:
		return min(max(c.notBefore, lastEnd), c.seen)
	case lastEnd != 0:
		return min(lastEnd, c.seen)
	}
	return c.seen
}

// open records that holder's owner holds k from c on. A span the same
// holder has open at k is updated in place (names learnt late replace the
// old ones); the spans of other holders of the same group end where
// start says.
func (h *history[K]) open(k K, src source, holder string, o *owner, c claim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.spans[k]
	for i := range list {
		s := &list[i]
		if s.holder != holder {
			continue
		}
		if s.to == open {
			s.owner = o
			return
		}
		// The holder's span ended (another took the address) under this
		// same claim: a pod keeps its claim for the life of its sandbox,
		// and a sandbox does not get back an IP it lost. This is a stale
		// update (the terminating pod's last ones), not a new claim.
		if c.claimed != 0 && s.claimed == c.claimed {
			return
		}
	}
	from := h.start(list, src.group(), o.who, c)
	list = append(list, span{from: from, to: open, src: src, holder: holder, owner: o, claimed: c.claimed})
	h.count++
	h.spans[k] = h.trim(list)
}

// close ends holder's open span at k, at time at (or at the span's start,
// if at is earlier: a span never ends before it begins).
func (h *history[K]) close(k K, holder string, at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.spans[k]
	for i := range list {
		if list[i].holder == holder && list[i].to == open {
			list[i].to = max(list[i].from, at)
		}
	}
}

// trim drops the oldest ended spans of one key past maxSpans: an address
// reused over and over (a Job's pods every second) keeps a bounded past.
// Open spans are never dropped. Called with mu held.
func (h *history[K]) trim(list []span) []span {
	for len(list) > h.maxSpans {
		oldest := -1
		for i := range list {
			if list[i].to != open && (oldest < 0 || list[i].to < list[oldest].to) {
				oldest = i
			}
		}
		if oldest < 0 {
			break
		}
		list = slices.Delete(list, oldest, oldest+1)
		h.count--
		h.dropped++
	}
	return list
}

// prune drops the spans that ended more than keep before now, and the keys
// left without spans.
func (h *history[K]) prune(now int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	limit := now - h.keep
	for k, list := range h.spans {
		kept := list[:0]
		for _, s := range list {
			if s.to == open || s.to > limit {
				kept = append(kept, s)
			}
		}
		h.count -= len(list) - len(kept)
		if len(kept) == 0 {
			delete(h.spans, k)
			continue
		}
		clear(list[len(kept):]) // let the dropped owners be collected
		h.spans[k] = kept
	}
}

// names returns what k names at t: of the spans covering t, the one of
// the first source, and of those the latest to begin. A pod also gets the
// service it is an endpoint of at t: the one whose endpoint port is
// pp.port (and protocol), else the first by name. ok is false when no span
// covers t. It allocates nothing, and takes the read lock once.
func (h *history[K]) names(k K, t int64, pp portProto) (n Names, ok bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	list := h.spans[k]
	var best *span
	for i := range list {
		s := &list[i]
		if s.covers(t) && (best == nil || s.src < best.src || (s.src == best.src && s.from > best.from)) {
			best = s
		}
	}
	if best == nil {
		return Names{}, false
	}
	n = best.owner.names
	if best.src.group() != srcPod {
		return n, true
	}
	// The pod's services: the endpoint spans that cover t and name it.
	service, matched := "", false
	for i := range list {
		s := &list[i]
		if s.src != srcEndpoint || !s.covers(t) || s.owner.who != best.owner.who {
			continue
		}
		m := pp.port != 0 && slices.Contains(s.owner.ports, pp)
		better := m && !matched || m == matched && (service == "" || s.owner.names.Service < service)
		if better {
			service, matched = s.owner.names.Service, m
		}
	}
	if service != "" {
		n.Service = service
	}
	return n, true
}

// sizes returns the keys and spans held, and the spans dropped so far.
func (h *history[K]) sizes() (keys, spans int, dropped uint64) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.spans), h.count, h.dropped
}
