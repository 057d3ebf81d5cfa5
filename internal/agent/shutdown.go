package agent

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"

	"loupe/internal/export/delivery"
)

// Shutdown follows a graceful shutdown, so that a caller that gives up on
// it (a second SIGINT or SIGTERM) can say what an immediate exit leaves
// undone. The zero value is ready; Run fills it.
type Shutdown struct {
	mu       sync.Mutex
	queues   []*delivery.Queue
	stopping bool // the run context is done
	detached bool // every program is detached: nothing more is counted
	evicting bool // the final eviction has started
	evicted  bool // ... and has handed its records to the sinks
}

func (s *Shutdown) update(f func(*Shutdown)) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// LogAbandoned logs, as errors, what exiting now loses: the records each
// network exporter still holds, and whether the final eviction (which
// moves what the kernel counted since the last eviction into the sinks)
// ran.
func (s *Shutdown) LogAbandoned(log *slog.Logger) {
	s.mu.Lock()
	queues := s.queues
	final := "not started"
	switch {
	case s.evicted:
		final = "done"
	case s.evicting:
		final = "interrupted"
	}
	detached, stopping := s.detached, s.stopping
	s.mu.Unlock()
	var total int
	for _, q := range queues {
		st := q.Stats()
		total += st.Queued
		log.Error("exiting before shutdown finished: exporter records not delivered",
			"exporter", st.Name, "queued", st.Queued)
	}
	log.Error("exiting before shutdown finished", "shutdown_started", stopping, "detached", detached,
		"final_eviction", final, "queued_records", total)
}

// memlockHint is what cilium/ebpf appends to every EPERM from creating a
// map or loading a program. Loupe needs 5.15+, where BPF memory is charged
// to the memory cgroup and RLIMIT_MEMLOCK plays no part, so the hint only
// misleads (and names a Go function).
const memlockHint = " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)"

// privilegeError turns a permission error into advice on what is missing,
// without cilium/ebpf's MEMLOCK hint; other errors pass unchanged. prefix
// is prepended to the message.
func privilegeError(prefix string, err error) error {
	if !errors.Is(err, os.ErrPermission) {
		if prefix == "" {
			return err
		}
		return &hintedError{msg: prefix + err.Error(), err: err}
	}
	msg := strings.ReplaceAll(err.Error(), memlockHint, "")
	return &hintedError{msg: prefix + msg + " (loupe run needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, or root)", err: err}
}

// hintedError is an error with its message rewritten; errors.Is and As
// still see the original.
type hintedError struct {
	msg string
	err error
}

func (e *hintedError) Error() string { return e.msg }
func (e *hintedError) Unwrap() error { return e.err }
