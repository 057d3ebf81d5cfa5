// Package ui serves the web UI: the built front end (web/, bundled into
// dist/ and embedded, so that the binary needs nothing else and works
// offline) and the control API's routes, on a listener of its own
// (ui.listen), apart from the metrics listener, so that a cluster's
// Prometheus can scrape the metrics without reaching the UI or its data.
//
// # Access
//
// Any local user can reach a loopback address, so the UI's listener gives
// out without the control API's token (control.token_file) only what the
// Read routes give: the agent's state and the flow records' addresses and
// counters. Payload routes (pcapng downloads, capture streams) and Write
// routes (triggers, rules) need the token, sent as
// "Authorization: Bearer TOKEN", even on loopback; on a listener beyond
// loopback every route needs it. The token travels in a header, never in
// a cookie, so a page of another origin cannot make the browser send it;
// the Host header must name the loopback listener (against DNS
// rebinding), an Origin header must be the UI's own, and a POST or PUT
// must carry a JSON body.
package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"loupe/internal/api"
)

//go:embed dist
var dist embed.FS

// Options configures a Server.
type Options struct {
	// Listen is host:port; "" or api.None: no UI.
	Listen string
	// TokenFile is control.token_file: the token the Payload and Write
	// routes need ("": none, and they are refused).
	TokenFile string
	Logger    *slog.Logger
}

// Server serves the UI on its listener.
type Server struct {
	log     *slog.Logger
	ln      net.Listener
	token   api.Token
	exposed bool
	srv     *http.Server
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

// Listen binds the UI's listener, so that a port in use stops the start
// before anything is loaded; nil, nil when the UI is off.
func Listen(o Options) (*Server, error) {
	if o.Listen == "" || o.Listen == api.None {
		return nil, nil
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{log: log.With("component", "ui"), done: make(chan struct{})}
	if o.TokenFile != "" {
		tok, err := api.LoadToken(o.TokenFile)
		if err != nil {
			return nil, err
		}
		s.token = tok
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("ui.listen %s: %w", o.Listen, err)
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	s.exposed = !net.ParseIP(host).IsLoopback()
	if s.exposed && !s.token.IsSet() {
		ln.Close()
		return nil, fmt.Errorf("ui.listen %s: beyond loopback every request needs the control API's token: set control.token_file, or listen on 127.0.0.1", o.Listen)
	}
	if s.exposed {
		s.log.Warn("the UI listens beyond loopback over plain HTTP: the bearer token can be read on the way; put TLS in front of it", "addr", ln.Addr().String())
	}
	s.ln = ln
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Addr is the address served.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Handler is the UI's handler over routes: the API under /api/, the
// front end everywhere else.
func (s *Server) Handler(routes []api.Route) (http.Handler, error) {
	apiHandler, err := api.NewHandler(routes, s.gate, 0, s.log)
	if err != nil {
		return nil, err
	}
	assets, err := fs.Sub(dist, "dist")
	if err != nil {
		return nil, err
	}
	files := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "+
			"connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
		if !s.hostOK(r) {
			api.WriteError(w, http.StatusMisdirectedRequest, fmt.Sprintf("host %q is not this UI's address: open it as http://%s/", r.Host, s.ln.Addr()))
			return
		}
		if strings.HasPrefix(r.URL.Path, "/api/") {
			apiHandler.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			api.WriteError(w, http.StatusMethodNotAllowed, "the UI's pages are read with GET")
			return
		}
		// The pages are one application: a path of its own (/flows)
		// is the index, the application picks the page.
		if _, err := fs.Stat(assets, strings.TrimPrefix(r.URL.Path, "/")); r.URL.Path != "/" && err != nil {
			r = r.Clone(r.Context())
			r.URL.Path = "/"
		}
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}), nil
}

// Serve starts answering routes and the front end.
func (s *Server) Serve(routes []api.Route) error {
	h, err := s.Handler(routes)
	if err != nil {
		return err
	}
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("UI stopped serving", "err", err)
		}
	}()
	s.log.Info("serving the UI", "url", "http://"+s.ln.Addr().String()+"/", "token", s.token.IsSet())
	return nil
}

// Close ends the streams, then the server.
func (s *Server) Close() {
	if s == nil {
		return
	}
	s.cancel()
	if s.srv == nil {
		s.ln.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
}

// hostOK: on loopback, the Host header must be a loopback name, so that
// a page whose DNS name was rebound to 127.0.0.1 cannot read the UI as
// its own origin. Beyond loopback the token guards every route.
func (s *Server) hostOK(r *http.Request) bool {
	if s.exposed {
		return true
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// gate decides a route's access on the UI's listener (the package
// comment says why).
func (s *Server) gate(a api.Access, r *http.Request) *api.Denial {
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return &api.Denial{Code: http.StatusForbidden, Msg: fmt.Sprintf("origin %s is not this UI's", o)}
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
			return &api.Denial{Code: http.StatusUnsupportedMediaType, Msg: "a request that changes the agent carries a JSON body (Content-Type: application/json)"}
		}
	}
	if a == api.Read && !s.exposed {
		return nil
	}
	if !s.token.IsSet() {
		return &api.Denial{Code: http.StatusForbidden, Msg: fmt.Sprintf("%s routes on the UI need the control API's token, and the agent has none: set control.token_file", a)}
	}
	if !s.token.Match(r) {
		return &api.Denial{Code: http.StatusUnauthorized, Msg: fmt.Sprintf("%s routes need the token of control.token_file (Authorization: Bearer TOKEN)", a)}
	}
	return nil
}
