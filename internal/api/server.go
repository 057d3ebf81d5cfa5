package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Timeouts of the server. Streams have no write deadline; everything
// else must be answered within RequestTimeout, so that a client that
// stops reading cannot hold a handler forever.
const (
	RequestTimeout    = 30 * time.Second
	readHeaderTimeout = 5 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	maxBodyBytes      = 1 << 20
	// closeTimeout bounds how long Close waits for handlers to return
	// once their contexts are cancelled.
	closeTimeout = 5 * time.Second
)

// Options configures a Server.
type Options struct {
	// Socket is the unix socket path; "" or None: no socket.
	Socket string
	// Listen is a TCP host:port; "" or None: no TCP listener. It needs
	// TokenFile.
	Listen    string
	TokenFile string
	Logger    *slog.Logger
	// RequestTimeout is how long a route that is not a stream has to
	// read its request and write its answer; 0: RequestTimeout.
	RequestTimeout time.Duration
}

// Server serves the routes on its listeners. Listen binds them (so that a
// path in use or a bad token file stops the agent before it loads
// anything), Serve starts answering, Close stops.
type Server struct {
	log   *slog.Logger
	sock  *unixSocket
	tcp   net.Listener
	token Token
	self  int // the agent's uid
	// timeout is the deadline of routes that are not streams.
	timeout time.Duration
	// ctx is every request's parent: cancelled by Close, it ends the
	// streams, which would otherwise keep Shutdown waiting.
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	servers []*http.Server
	wg      sync.WaitGroup
	closed  bool
}

// Listen binds the socket and the TCP listener of o. Nothing is answered
// before Serve.
func Listen(o Options) (_ *Server, err error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "api")
	s := &Server{log: log, self: os.Geteuid(), timeout: o.RequestTimeout}
	if s.timeout <= 0 {
		s.timeout = RequestTimeout
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if o.Listen != "" && o.Listen != None {
		if o.TokenFile == "" {
			return nil, errors.New("control.token_file: required when control.listen is set: every request on TCP needs its bearer token")
		}
		if s.token, err = LoadToken(o.TokenFile); err != nil {
			return nil, err
		}
		if s.tcp, err = net.Listen("tcp", o.Listen); err != nil {
			return nil, fmt.Errorf("control.listen %s: %w", o.Listen, err)
		}
		if host, _, _ := net.SplitHostPort(s.tcp.Addr().String()); !net.ParseIP(host).IsLoopback() {
			log.Warn("the control API listens beyond loopback over plain HTTP: the bearer token can be read on the way; put TLS in front of it",
				"addr", s.tcp.Addr().String())
		}
	}
	if o.Socket != "" && o.Socket != None {
		if s.sock, err = listenUnix(o.Socket, log); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SocketPath is the unix socket served, "" if none.
func (s *Server) SocketPath() string {
	if s.sock == nil {
		return ""
	}
	return s.sock.path
}

// Addr is the TCP address served, nil if none.
func (s *Server) Addr() net.Addr {
	if s.tcp == nil {
		return nil
	}
	return s.tcp.Addr()
}

// Serve starts answering routes on every listener. A route that is
// malformed or registered twice is an error and nothing is served.
func (s *Server) Serve(routes []Route) error {
	h, err := s.handler(routes)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("api: serve after close")
	}
	start := func(ln net.Listener, tcp bool) {
		srv := &http.Server{
			Handler:           h,
			ReadHeaderTimeout: readHeaderTimeout,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    maxHeaderBytes,
			BaseContext:       func(net.Listener) context.Context { return s.ctx },
			ConnContext:       connContext(tcp),
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}
		s.servers = append(s.servers, srv)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("control API stopped serving", "addr", ln.Addr().String(), "err", err)
			}
		}()
	}
	if s.sock != nil {
		start(s.sock.ln, false)
		s.log.Info("serving the control API", "socket", s.sock.path, "routes", len(routes))
	}
	if s.tcp != nil {
		start(s.tcp, true)
		s.log.Info("serving the control API", "addr", s.tcp.Addr().String(), "routes", len(routes))
	}
	return nil
}

// Close cancels every request (ending the streams), waits a little for
// the handlers to return, then closes the connections and removes the
// socket file. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	servers := s.servers
	s.mu.Unlock()

	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			s.log.Warn("control API: handlers still running at shutdown; closing their connections", "err", err)
			srv.Close()
		}
	}
	s.wg.Wait()
	if s.tcp != nil && len(servers) == 0 {
		errs = append(errs, s.tcp.Close())
	}
	if s.sock != nil {
		// Serve closed the listener already if it ran; the file is
		// ours to remove either way.
		errs = append(errs, s.sock.close())
	}
	return errors.Join(errs...)
}

// handler routes requests to routes, their access checked by authorize
// against the connection's transport and peer.
func (s *Server) handler(routes []Route) (http.Handler, error) {
	gate := func(a Access, r *http.Request) *Denial {
		c := connFrom(r.Context())
		return authorize(a, c, c.tcp && s.token.Match(r), s.self)
	}
	return NewHandler(routes, gate, s.timeout, s.log)
}

// Gate decides whether a request may reach a route of class a: nil lets
// it through, a Denial answers it with its code and message.
type Gate func(a Access, r *http.Request) *Denial

// NewHandler routes requests to routes: each request passes gate first,
// then gets its deadlines (timeout, unless the route is a stream); unknown
// paths are answered 404 and known paths with another method 405, in
// JSON. The control API's listeners and the UI's serve routes through it,
// so that a route behaves the same wherever it is reached.
func NewHandler(routes []Route, gate Gate, timeout time.Duration, log *slog.Logger) (http.Handler, error) {
	if timeout <= 0 {
		timeout = RequestTimeout
	}
	mux := http.NewServeMux()
	seen := map[string]bool{}
	var methods []string
	for _, rt := range routes {
		if err := checkRoute(rt); err != nil {
			return nil, err
		}
		pattern := rt.Method + " " + rt.Path
		if seen[pattern] {
			return nil, fmt.Errorf("api: route %s registered twice", pattern)
		}
		seen[pattern] = true
		if !slices.Contains(methods, rt.Method) {
			methods = append(methods, rt.Method)
		}
		if err := handle(mux, pattern, gated(rt, gate, timeout, log)); err != nil {
			return nil, err
		}
	}
	return &router{mux: mux, methods: methods, log: log}, nil
}

func checkRoute(rt Route) error {
	name := rt.Method + " " + rt.Path
	switch {
	case rt.Method == "" || strings.ToUpper(rt.Method) != rt.Method || strings.ContainsAny(rt.Method, " /"):
		return fmt.Errorf("api: route %s: method must be an upper-case HTTP method", name)
	case !strings.HasPrefix(rt.Path, Prefix):
		return fmt.Errorf("api: route %s: path must start with %s", name, Prefix)
	case rt.Access < Read || rt.Access > Write:
		return fmt.Errorf("api: route %s: no access class (Read, Payload or Write)", name)
	case rt.Handler == nil:
		return fmt.Errorf("api: route %s: no handler", name)
	}
	return nil
}

// handle registers a pattern, turning the mux's panic on a malformed or
// conflicting pattern into an error: routes come from units, and one bad
// route must stop the agent's start, not crash it.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("api: route %s: %v", pattern, r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// gated wraps a route's handler with its access check and deadlines.
func gated(rt Route, gate Gate, timeout time.Duration, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := gate(rt.Access, r); d != nil {
			c := connFrom(r.Context())
			log.Info("control API request refused", "method", r.Method, "path", r.URL.Path,
				"access", rt.Access.String(), "tcp", c.tcp, "peer_uid", c.peer, "remote", r.RemoteAddr, "status", d.Code)
			if d.Code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="loupe"`)
			}
			WriteError(w, d.Code, d.Msg)
			return
		}
		if !rt.Stream {
			rc := http.NewResponseController(w)
			deadline := time.Now().Add(timeout)
			_ = rc.SetReadDeadline(deadline)
			_ = rc.SetWriteDeadline(deadline)
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		rt.Handler.ServeHTTP(w, r)
	})
}

// router answers 404 and 405 in JSON, which http.ServeMux answers in
// plain text, and logs every request at debug level.
type router struct {
	mux     *http.ServeMux
	methods []string
	log     *slog.Logger
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	defer func() {
		rt.log.Debug("control API request", "method", r.Method, "path", r.URL.Path,
			"status", rec.status(), "duration", time.Since(start))
	}()
	if _, pattern := rt.mux.Handler(r); pattern != "" {
		// Through the mux, not the handler it returned: serving sets
		// the wildcards' values (r.PathValue).
		rt.mux.ServeHTTP(rec, r)
		return
	}
	// No pattern matched: the path may exist with another method.
	var allow []string
	for _, m := range rt.methods {
		probe := r.WithContext(r.Context()) // a shallow copy
		probe.Method = m
		if _, p := rt.mux.Handler(probe); p != "" {
			allow = append(allow, m)
			if m == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
	}
	if len(allow) > 0 {
		rec.Header().Set("Allow", strings.Join(allow, ", "))
		WriteError(rec, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	WriteError(rec, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s", r.URL.Path))
}

// recorder remembers the status code for the log. It unwraps to the
// server's writer, so that http.ResponseController (deadlines, Flush)
// reaches it, and flushes for handlers that assert http.Flusher.
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
