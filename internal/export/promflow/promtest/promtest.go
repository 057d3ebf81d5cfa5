// Package promtest runs a real Prometheus server for tests: the test starts
// it, it scrapes the targets every second, the test queries its HTTP API,
// and t.Cleanup kills it. It is shared by the promflow tests and the
// end-to-end tests, which run it inside a network namespace.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// Config says what to scrape and how to reach the server.
type Config struct {
	// Targets are host:port addresses whose /metrics is scraped every
	// ScrapeInterval, under job "loupe".
	Targets []string
	// ScrapeInterval is also the scrape's timeout: 0 is one second. A
	// target of tens of thousands of series on a loaded machine needs
	// more, or every scrape times out and the target reads as down.
	ScrapeInterval time.Duration
	// Listen is the server's web address. Empty picks a free loopback
	// port (only meaningful when the server runs in the test's namespace).
	Listen string
	// Command builds the server's command; nil is exec.Command. Pass a
	// namespace's Command to run the server inside it.
	Command func(name string, args ...string) *exec.Cmd
	// Dial connects the test to the server; nil dials directly. Pass a
	// dialer that enters the server's namespace.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is a running Prometheus.
type Server struct {
	t       testing.TB
	addr    string
	client  *http.Client
	targets []string
	logs    *testutil.Buffer
	exited  chan struct{}
}

// Sample is one element of an instant vector.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Start runs Prometheus (skipping or failing the test as RequirePeer does
// if it is not installed) and waits until it is ready.
func Start(t testing.TB, c Config) *Server {
	t.Helper()
	bin := testutil.RequirePeer(t, "prometheus")
	if c.Command == nil {
		c.Command = exec.Command
	}
	dial := c.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	}
	s := &Server{
		t:       t,
		targets: c.Targets,
		client:  &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}},
		logs:    &testutil.Buffer{},
		exited:  make(chan struct{}),
	}
	s.addr = c.Listen
	if s.addr == "" {
		s.addr = freePort(t)
	}
	dir := t.TempDir()
	var cfg strings.Builder
	every := c.ScrapeInterval
	if every <= 0 {
		every = time.Second
	}
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %[1]s\n  scrape_timeout: %[1]s\n  evaluation_interval: 1s\n", model(every))
	fmt.Fprintf(&cfg, "scrape_configs:\n  - job_name: loupe\n    static_configs:\n      - targets: [")
	for i, tg := range c.Targets {
		if i > 0 {
			cfg.WriteString(", ")
		}
		fmt.Fprintf(&cfg, "%q", tg)
	}
	cfg.WriteString("]\n")
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := c.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+s.addr,
		"--log.level=info",
	)
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("prometheus (pid %d) did not exit within 10s of SIGKILL", cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", s.logs.String())
		}
	})
	s.waitReady(30 * time.Second)
	return s
}

// freePort returns a loopback address no one listens on now.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (s *Server) waitReady(timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			s.t.Fatalf("prometheus exited before it was ready:\n%s", s.logs.String())
		default:
		}
		resp, err := s.client.Get("http://" + s.addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("prometheus not ready within %v:\n%s", timeout, s.logs.String())
}

// Query evaluates an instant query now and returns its vector.
func (s *Server) Query(expr string) []Sample {
	s.t.Helper()
	out, err := s.query(expr)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// Scalar evaluates a query that must return exactly one sample.
func (s *Server) Scalar(expr string) float64 {
	s.t.Helper()
	v := s.Query(expr)
	if len(v) != 1 {
		s.t.Fatalf("query %s: %d samples, want 1: %+v", expr, len(v), v)
	}
	return v[0].Value
}

func (s *Server) query(expr string) ([]Sample, error) {
	resp, err := s.client.Get("http://" + s.addr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %s: decode %q: %w", expr, body, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: status %s, type %s: %s", expr, r.Status, r.Data.ResultType, r.Error)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, e := range r.Data.Result {
		str, _ := e.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", expr, e.Value[1], err)
		}
		out = append(out, Sample{Labels: e.Metric, Value: v})
	}
	return out, nil
}

// WaitScraped waits until every target has been scraped successfully by a
// scrape that started after t0, so that queries see the targets' state as
// of t0 or later. Samples of one scrape are committed together with its
// `up` sample, so they are visible once `up` is.
func (s *Server) WaitScraped(t0 time.Time, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ts, err1 := s.query(`timestamp(up{job="loupe"})`)
		up, err2 := s.query(`up{job="loupe"}`)
		if err1 == nil && err2 == nil {
			fresh := map[string]bool{}
			for _, e := range ts {
				fresh[e.Labels["instance"]] = e.Value > float64(t0.UnixMilli())/1000
			}
			ok := len(ts) == len(s.targets)
			for _, e := range up {
				ok = ok && e.Value == 1 && fresh[e.Labels["instance"]]
			}
			if ok && len(up) == len(s.targets) {
				return
			}
			last = fmt.Sprintf("timestamps %+v, up %+v", ts, up)
		} else {
			last = fmt.Sprint(err1, err2)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.t.Fatalf("targets %v not scraped after %v within %v: %s", s.targets, t0.Format(time.RFC3339Nano), timeout, last)
}

// model writes d as Prometheus's configuration reads a duration (whole
// milliseconds and up: "1500ms", "5s").
func model(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}
