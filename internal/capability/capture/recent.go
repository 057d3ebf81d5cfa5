package capture

import (
	"sync"
	"time"
)

// recentTraces is how many triggered connections the unit remembers for
// GET /api/v1/captures: the newest, oldest forgotten first.
const recentTraces = 256

// Trace is a triggered connection: the trigger that fired, the response
// status that fired it (0: a TCP reset), the connection, and the request
// line of the exchange when a captured packet carried it.
type Trace struct {
	ID      string    `json:"trace"`
	Trigger string    `json:"trigger"`
	Status  uint16    `json:"status"`
	Time    time.Time `json:"time"`
	Src     string    `json:"src"`
	Dst     string    `json:"dst"`
	Iface   string    `json:"iface"`
	Request string    `json:"request,omitempty"`
}

// traceLog keeps the recent traces, newest last.
type traceLog struct {
	mu     sync.Mutex
	traces []Trace
}

func (l *traceLog) add(t Trace) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.traces) == recentTraces {
		l.traces = append(l.traces[:0], l.traces[1:]...)
	}
	l.traces = append(l.traces, t)
}

// request sets the request line of trace id, if it has none yet.
func (l *traceLog) request(id, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.traces) - 1; i >= 0; i-- {
		if l.traces[i].ID == id {
			if l.traces[i].Request == "" {
				l.traces[i].Request = line
			}
			return
		}
	}
}

// list returns the traces, newest first.
func (l *traceLog) list() []Trace {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Trace, len(l.traces))
	for i, t := range l.traces {
		out[len(out)-1-i] = t
	}
	return out
}
