package api

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"loupe/internal/cli"
)

// Client talks to a running agent. Its methods take a context: cancel it
// to give up, which for a stream also ends the agent's side. No timeout
// is built in but Get's, since a stream may wait long for its first byte.
type Client struct {
	socket string // "" over TCP
	base   string
	token  string
	hc     *http.Client
}

// dialTimeout bounds connecting; an agent answers at once or not at all.
const dialTimeout = 2 * time.Second

// NewClient returns a client of the agent serving the unix socket at
// path. Nothing is dialled before the first request.
func NewClient(path string) (*Client, error) {
	switch path {
	case "":
		return nil, errors.New("no control socket given: pass it with --control PATH")
	case None:
		return nil, errors.New("the control socket is disabled (--control none): pass the agent's socket with --control PATH")
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: dialTimeout}
			c, err := d.DialContext(ctx, "unix", path)
			if err != nil {
				return nil, connectError(path, err)
			}
			return c, nil
		},
		MaxIdleConns:    2,
		IdleConnTimeout: 30 * time.Second,
	}
	// The host is a placeholder: the transport dials the socket.
	return &Client{socket: path, base: "http://loupe", hc: &http.Client{Transport: tr}}, nil
}

// NewTCPClient returns a client of the agent's TCP listener at addr
// (host:port), authenticated with token.
func NewTCPClient(addr, token string) *Client {
	tr := &http.Transport{
		DialContext:     (&net.Dialer{Timeout: dialTimeout}).DialContext,
		MaxIdleConns:    2,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{base: "http://" + addr, token: token, hc: &http.Client{Transport: tr}}
}

// StatusError is an error response of the agent.
type StatusError struct {
	Code    int    // HTTP status
	Message string // the agent's {"error": ...}
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("agent answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// Do sends a request to path (/api/v1/...) and returns the response if
// its status is 2xx; the caller closes its body. Any other status is a
// *StatusError with the agent's message.
func (c *Client) Do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// The url.Error around it names a placeholder URL: say what
		// failed instead.
		var ce *ConnectError
		if errors.As(err, &ce) {
			return nil, ce
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, unwrapURL(err))
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	se := &StatusError{Code: resp.StatusCode}
	var e Error
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		se.Message = e.Error
	} else {
		se.Message = strings.TrimSpace(string(data))
	}
	return nil, se
}

// Get sends GET path and decodes the JSON answer into v. Without a
// deadline in ctx, it gives up a little after the agent would have.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, RequestTimeout+5*time.Second)
		defer cancel()
	}
	resp, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: decoding the answer: %w", path, err)
	}
	return nil
}

// PrintJSON sends GET path and writes the agent's JSON answer to w as it
// came, indented: a `--json` output, which carries the fields this build
// does not know yet too.
func (c *Client) PrintJSON(ctx context.Context, path string, w io.Writer) error {
	var doc json.RawMessage
	if err := c.Get(ctx, path, &doc); err != nil {
		return err
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

// Stream sends a request to a streaming route and returns the body to
// read until EOF or until ctx is cancelled, which closes the connection
// and so ends the agent's handler. The caller closes it.
func (c *Client) Stream(ctx context.Context, method, path string, body io.Reader) (io.ReadCloser, error) {
	resp, err := c.Do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Status fetches the agent's status document.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.Get(ctx, StatusPath, &st)
	return st, err
}

// ConnectError is a failure to reach the agent's socket, worded for the
// user: whether the socket is missing, refused or forbidden, and that
// --control picks another.
type ConnectError struct {
	Socket string
	Err    error
	msg    string
}

func (e *ConnectError) Error() string { return e.msg }
func (e *ConnectError) Unwrap() error { return e.Err }

func connectError(path string, err error) error {
	var msg string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		msg = fmt.Sprintf("control socket %s does not exist: is the agent running? (an agent serving another socket is reached with --control PATH)", path)
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("control socket %s: nothing answers: the agent is not running (or died and left the socket); an agent serving another socket is reached with --control PATH", path)
	case errors.Is(err, fs.ErrPermission):
		msg = fmt.Sprintf("control socket %s: permission denied: run as root or the agent's user, or pass another socket with --control PATH", path)
	case errors.Is(err, syscall.ENOTSOCK):
		msg = fmt.Sprintf("control socket %s is not a socket: pass the agent's socket with --control PATH", path)
	default:
		msg = fmt.Sprintf("control socket %s: %v (pass another socket with --control PATH)", path, unwrapOp(err))
	}
	return &ConnectError{Socket: path, Err: err, msg: msg}
}

// unwrapOp drops the "dial unix PATH:" of a net.OpError, whose path the
// message already says.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// unwrapURL drops the url.Error around a transport error: its URL holds
// a placeholder host.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// ControlFlag defines --control on fs for a command that talks to the
// agent: the socket path, by default $LOUPE_CONTROL_SOCKET or
// DefaultSocket.
func ControlFlag(fs *flag.FlagSet) *string {
	def := DefaultSocket
	if v := os.Getenv(SocketEnv); v != "" {
		def = v
	}
	return fs.String("control", def, "`path` of the agent's control socket (control.socket; "+SocketEnv+")")
}

// ReadCmd is the body of a CLI verb that shows what one read route of the
// running agent answers (`loupe status`, `metrics`, `captures`): with
// --json it prints the answer as the agent wrote it, else it decodes it
// into a T and hands it to show, the verb's human form.
func ReadCmd[T any](name, path string, timeout time.Duration, args []string, stdout, stderr io.Writer,
	show func(io.Writer, *T) error) error {
	fs := cli.NewFlagSet(name, "[--json] [--control PATH]", stdout, stderr)
	asJSON := fs.Bool("json", false, "print the agent's answer (GET "+path+") as it is")
	socket := ControlFlag(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	c, err := NewClient(*socket)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if *asJSON {
		return c.PrintJSON(ctx, path, stdout)
	}
	var v T
	if err := c.Get(ctx, path, &v); err != nil {
		return err
	}
	return show(stdout, &v)
}
