package api

import (
	"io"
	"net/http"
	"strings"
)

// Lines writes the answer of a route that returns a list of records: JSON
// lines (application/x-ndjson), or one JSON array when the client asked
// for it with Accept: application/json. The status line and headers go
// out with the first record (or at End), so that a handler can still
// answer an error, or set a header, until then.
type Lines struct {
	w       http.ResponseWriter
	array   bool
	n       int
	started bool
}

// NewLines returns the writer of r's answer.
func NewLines(w http.ResponseWriter, r *http.Request) *Lines {
	return &Lines{w: w, array: strings.Contains(r.Header.Get("Accept"), "application/json")}
}

func (l *Lines) start() {
	if l.started {
		return
	}
	l.started = true
	ct := "application/x-ndjson"
	if l.array {
		ct = "application/json"
	}
	l.w.Header().Set("Content-Type", ct)
	l.w.Header().Set("X-Content-Type-Options", "nosniff")
	l.w.WriteHeader(http.StatusOK)
	if l.array {
		_, _ = io.WriteString(l.w, "[")
	}
}

// Add writes one record, b, its JSON encoding (one line, no newline).
// An error means the client is gone.
func (l *Lines) Add(b []byte) error {
	l.start()
	sep := ""
	if l.array && l.n > 0 {
		sep = ","
	}
	l.n++
	if _, err := io.WriteString(l.w, sep); err != nil {
		return err
	}
	if _, err := l.w.Write(b); err != nil {
		return err
	}
	if !l.array {
		_, err := io.WriteString(l.w, "\n")
		return err
	}
	return nil
}

// End finishes the answer: the array's closing bracket.
func (l *Lines) End() {
	l.start()
	if l.array {
		_, _ = io.WriteString(l.w, "]\n")
	}
}
