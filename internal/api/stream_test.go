package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// ticker is a stream route: it writes a line every interval, flushing
// each, until its request context is done or a write fails. It then
// reports on ended its context's error, waiting for the cancellation a
// failed write may precede: nil would mean the context outlived the
// client.
func ticker(interval time.Duration, ended chan<- error) Route {
	return Route{Method: http.MethodGet, Path: Prefix + "ticks", Access: Read, Stream: true,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
				ended <- r.Context().Err()
			}()
			w.Header().Set("Content-Type", "text/plain")
			rc := http.NewResponseController(w)
			for i := 0; ; i++ {
				if _, err := fmt.Fprintf(w, "tick %d\n", i); err != nil {
					return
				}
				if err := rc.Flush(); err != nil {
					return
				}
				select {
				case <-r.Context().Done():
					return
				case <-time.After(interval):
				}
			}
		})}
}

func TestStreamCancelledWhenClientGoes(t *testing.T) {
	path := socketPath(t)
	ended := make(chan error, 1)
	serve(t, Options{Socket: path}, ticker(10*time.Millisecond, ended))
	c, _ := NewClient(path)
	ctx, cancel := context.WithCancel(context.Background())
	body, err := c.Stream(ctx, http.MethodGet, Prefix+"ticks", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Flushed lines arrive while the handler runs.
	r := bufio.NewReader(body)
	for i := range 3 {
		line, err := r.ReadString('\n')
		if want := fmt.Sprintf("tick %d\n", i); err != nil || line != want {
			t.Fatalf("line %d: %q, %v; want %q", i, line, err, want)
		}
	}
	select {
	case err := <-ended:
		t.Fatalf("the handler ended while the client read: %v", err)
	default:
	}
	cancel()
	body.Close()
	select {
	case err := <-ended:
		if err != context.Canceled {
			t.Fatalf("handler's context: %v, want it cancelled once the client left", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not end after the client left")
	}
}

// Streams outlive the deadline of other routes; a route that is not a
// stream is cut at it.
func TestStreamHasNoWriteDeadline(t *testing.T) {
	path := socketPath(t)
	const timeout = 300 * time.Millisecond
	ended := make(chan error, 1)
	slow := Route{Method: http.MethodGet, Path: Prefix + "slow", Access: Read,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * timeout)
			WriteJSON(w, http.StatusOK, map[string]string{"late": strings.Repeat("x", 1<<20)})
		})}
	serve(t, Options{Socket: path, RequestTimeout: timeout}, ticker(50*time.Millisecond, ended), slow)
	c, _ := NewClient(path)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, err := c.Stream(ctx, http.MethodGet, Prefix+"ticks", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	r := bufio.NewReader(body)
	start := time.Now()
	var n int
	for time.Since(start) < 3*timeout {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatalf("stream cut after %v (%d lines): %v", time.Since(start), n, err)
		}
		n++
	}

	resp, err := c.Do(context.Background(), http.MethodGet, Prefix+"slow", nil)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a route that is not a stream answered past its deadline")
	}
}

func TestCloseEndsStreams(t *testing.T) {
	path := socketPath(t)
	ended := make(chan error, 1)
	s := serve(t, Options{Socket: path}, ticker(10*time.Millisecond, ended))
	c, _ := NewClient(path)
	body, err := c.Stream(context.Background(), http.MethodGet, Prefix+"ticks", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	if _, err := bufio.NewReader(body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(closeTimeout / 2):
		// Close cancels the streams' contexts first: it must not wait
		// for its timeout, then cut them.
		t.Fatal("Close waited for an open stream")
	}
	select {
	case err := <-ended:
		if err != context.Canceled {
			t.Fatalf("stream handler ended with %v, want its context cancelled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the stream handler did not return")
	}
	if _, err := io.ReadAll(body); err != nil {
		t.Logf("stream body after Close: %v", err)
	}
}
