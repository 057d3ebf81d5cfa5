package k8s

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// health follows whether the API server answers. Informers keep their
// objects when it goes away and retry on their own, with a backoff (up to
// 30 s between tries); on reconnection they resume their watches, or list
// again when the server no longer has the changes since their last view,
// and report what changed meanwhile (deletions as tombstones). So an
// outage needs no action here beyond saying so: the resolver answers from
// its last view all along.
//
// An outage starts at the first failed watch or probe, and ends when the
// server answers /readyz again.
type health struct {
	mu          sync.Mutex
	down        bool
	downSince   time.Time
	lastError   string
	outages     uint64
	watchErrors map[string]uint64 // by resource
	refused     map[string]bool   // resources whose watch was refused, logged
}

// watchError counts an informer's failed list or watch. The server's
// being unreachable (no connection, a connection cut, a 5xx answer) starts
// an outage unless one is going on. The rest is no outage, since the server
// answers: a watch that ended or whose resource version the server no
// longer has (after a restart) is how informers resync, and a refusal (the
// agent's role lacks a permission, its token is not accepted) is logged
// once per resource while the informer keeps trying.
func (h *health) watchError(r *Resolver, resource string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watchErrors == nil {
		h.watchErrors = map[string]uint64{}
	}
	h.watchErrors[resource]++
	if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	h.lastError = resource + ": " + err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code < 500 && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		return
	}
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		if !h.refused[resource] {
			if h.refused == nil {
				h.refused = map[string]bool{}
			}
			h.refused[resource] = true
			r.log.Error("kubernetes API server refuses a watch: names from it are missing until the agent's role allows list and watch (k8s.PolicyRules)",
				"resource", resource, "err", err)
		}
		return
	}
	h.startOutage(r)
}

// startOutage is called with mu held.
func (h *health) startOutage(r *Resolver) {
	if h.down {
		return
	}
	h.down, h.downSince = true, r.now()
	h.outages++
	r.log.Warn("kubernetes API server unreachable: names come from the last view until it answers", "err", h.lastError)
}

func (h *health) probed(r *Resolver, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.lastError = "readyz: " + err.Error()
		h.startOutage(r)
		return
	}
	if h.down {
		r.log.Info("kubernetes API server answers again: informers catch up", "outage", r.now().Sub(h.downSince).Round(time.Millisecond))
		h.down = false
	}
}

// probeTimeout bounds one /readyz: a server slow to answer under load is
// not an outage.
const probeTimeout = 5 * time.Second

// probe asks the API server's /readyz every interval, on a client of its
// own without a rate limit, so that the informers' relists after an outage
// do not hold it back. /readyz is readable by any client (the
// system:public-info-viewer role), so the probe needs no access beyond the
// informers'.
func (r *Resolver) probe(ctx context.Context, c rest.Interface) {
	t := time.NewTicker(r.opts.ProbeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := c.Get().AbsPath("/readyz").Do(pctx).Error()
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.health.probed(r, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
