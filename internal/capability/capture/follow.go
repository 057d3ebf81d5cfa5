package capture

import (
	"net/http"
	"sync"
	"sync/atomic"

	"loupe/internal/pcapng"
)

// followerQueue is the number of packets a follower may fall behind by;
// past it, its packets are dropped and counted: a slow reader never stalls
// the files or the other followers (nor the kernel, which the perf buffer
// keeps apart).
const followerQueue = 4096

// follower is one `loupe capture --follow`: a queue of packets (copies:
// the reader's buffer is reused).
type follower struct {
	ch      chan pcapng.Packet
	dropped atomic.Uint64
	done    chan struct{}
	once    sync.Once
}

func (f *follower) stop() { f.once.Do(func() { close(f.done) }) }

// followers are the clients following the capture.
type followers struct {
	mu  sync.Mutex
	set map[*follower]struct{}
	// n is len(set), for send to skip the lock when nobody follows, as
	// at nearly every packet.
	n       atomic.Int32
	dropped atomic.Uint64 // over every follower, gone ones included
	total   atomic.Uint64 // followers ever
}

func newFollowers() *followers { return &followers{set: map[*follower]struct{}{}} }

func (fs *followers) count() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.set)
}

func (fs *followers) add() *follower {
	f := &follower{ch: make(chan pcapng.Packet, followerQueue), done: make(chan struct{})}
	fs.mu.Lock()
	fs.set[f] = struct{}{}
	fs.n.Store(int32(len(fs.set)))
	fs.mu.Unlock()
	fs.total.Add(1)
	return f
}

func (fs *followers) remove(f *follower) {
	fs.mu.Lock()
	delete(fs.set, f)
	fs.n.Store(int32(len(fs.set)))
	fs.mu.Unlock()
	f.stop()
}

// send queues a copy of p for every follower, dropping it for those whose
// queue is full.
func (fs *followers) send(p *pcapng.Packet) {
	if fs.n.Load() == 0 {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.set) == 0 {
		return
	}
	cp := *p
	cp.Data = append([]byte(nil), p.Data...)
	for f := range fs.set {
		select {
		case f.ch <- cp:
		default:
			f.dropped.Add(1)
			fs.dropped.Add(1)
		}
	}
}

// closeAll ends every follow (the agent stops).
func (fs *followers) closeAll() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for f := range fs.set {
		f.stop()
	}
}

// serveFollow streams the capture as pcapng until the client goes or the
// agent stops. The datapath sends packets to userspace only while someone
// reads them: the first follower turns that on when no files are written,
// the last one off.
func (u *Unit) serveFollow(w http.ResponseWriter, r *http.Request) {
	f := u.follow.add()
	u.mu.Lock()
	err := u.applyLocked()
	u.mu.Unlock()
	defer func() {
		u.follow.remove(f)
		u.mu.Lock()
		if err := u.applyLocked(); err != nil {
			u.log.Error("capture output off after the last follower", "err", err)
		}
		u.mu.Unlock()
		if n := f.dropped.Load(); n > 0 {
			u.log.Warn("a capture follower was too slow: packets dropped for it", "dropped", n)
		}
	}()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	pw := pcapng.NewWriter(w, pcapng.Options{UserAppl: "loupe " + u.version, Comment: "loupe capture --follow"})
	if pw.Flush() != nil || rc.Flush() != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-f.done:
			// Drain what is queued, then end the stream cleanly.
			for {
				select {
				case p := <-f.ch:
					if pw.WritePacket(&p) != nil {
						return
					}
				default:
					_ = pw.Flush()
					return
				}
			}
		case p := <-f.ch:
			if pw.WritePacket(&p) != nil {
				return
			}
			// Write what else is queued, then flush once.
			for more := true; more; {
				select {
				case p := <-f.ch:
					if pw.WritePacket(&p) != nil {
						return
					}
				default:
					more = false
				}
			}
			if pw.Flush() != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
