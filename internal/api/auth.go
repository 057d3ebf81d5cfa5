package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Token file bounds: a token shorter than minToken is guessable over a
// network; a file longer than maxTokenFile is a mistaken path.
const (
	minToken     = 16
	maxTokenFile = 4096
)

// readToken reads the bearer token of the TCP listener: the file's
// content, surrounding white space trimmed. The file must be a regular
// file that neither group nor others can access, since whoever reads it
// controls the agent. The mode is checked on the open file, so that what
// is checked is what is read.
func readToken(path string) ([]byte, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("control.token_file %s: "+format, append([]any{path}, args...)...)
	}
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fail("%w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fail("%w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fail("not a regular file (%s)", fileKind(fi.Mode()))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fail("mode %04o lets group or others access it; make it 0600 (chmod 600 %s)", perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return nil, fail("%w", err)
	}
	if len(data) > maxTokenFile {
		return nil, fail("larger than %d bytes: not a token file", maxTokenFile)
	}
	tok := bytes.TrimSpace(data)
	if len(tok) < minToken {
		return nil, fail("the token is %d bytes long, want at least %d (e.g. head -c 32 /dev/urandom | base64)", len(tok), minToken)
	}
	for _, c := range tok {
		// It travels in an HTTP header: visible ASCII only.
		if c < 0x21 || c > 0x7e {
			return nil, fail("the token holds a byte that is not visible ASCII (0x%02x)", c)
		}
	}
	return tok, nil
}

// tokenDigest is what requests are compared against: comparing digests
// of equal length keeps the comparison's time independent of the token's
// length as well as of its content.
func tokenDigest(tok []byte) [sha256.Size]byte { return sha256.Sum256(tok) }

// Token is a bearer token read from a token file, kept as its digest. The
// zero Token matches no request.
type Token struct {
	digest [sha256.Size]byte
	set    bool
}

// LoadToken reads the token file at path (control.token_file's rules: a
// regular file, mode 0600 or stricter, at least 16 visible ASCII
// characters).
func LoadToken(path string) (Token, error) {
	tok, err := readToken(path)
	if err != nil {
		return Token{}, err
	}
	return Token{digest: tokenDigest(tok), set: true}, nil
}

// IsSet reports whether the token was loaded.
func (t Token) IsSet() bool { return t.set }

// Match reports whether r carries the token (Authorization: Bearer).
func (t Token) Match(r *http.Request) bool {
	return t.set && bearerOK(r, t.digest)
}

// bearerOK reports whether r carries the token whose digest is want.
func bearerOK(r *http.Request, want [sha256.Size]byte) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := tokenDigest([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// conn is what the server knows of a request's connection.
type conn struct {
	tcp bool
	// peer is the uid of the process at the other end of a unix socket,
	// from the kernel (SO_PEERCRED); -1 if unknown.
	peer int
}

type connKey struct{}

// connContext records a connection's transport and peer in the context of
// its requests.
func connContext(tcp bool) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		info := conn{tcp: tcp, peer: -1}
		if uc, ok := c.(*net.UnixConn); ok {
			info.peer = peerUID(uc)
		}
		return context.WithValue(ctx, connKey{}, info)
	}
}

func connFrom(ctx context.Context) conn {
	if c, ok := ctx.Value(connKey{}).(conn); ok {
		return c
	}
	// Unknown: treated as the most restricted transport.
	return conn{tcp: true, peer: -1}
}

func peerUID(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	uid := -1
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			uid = int(cred.Uid)
		}
	})
	return uid
}

// Denial is why a request is refused: a status code and a message.
type Denial struct {
	Code int
	Msg  string
}

// authorize decides whether a request of class a, on connection c, may
// proceed. On TCP every class needs the token (tokenOK). On the unix
// socket, connecting was the authorisation for Read; Payload and Write
// also need the peer to be root or the agent's user (self), so that
// widening the socket's permissions for reading hands out nothing else.
func authorize(a Access, c conn, tokenOK bool, self int) *Denial {
	if c.tcp {
		if !tokenOK {
			return &Denial{http.StatusUnauthorized, "missing or invalid bearer token"}
		}
		return nil
	}
	if a == Read {
		return nil
	}
	if c.peer != 0 && c.peer != self {
		who := "unknown user"
		if c.peer >= 0 {
			who = fmt.Sprintf("uid %d", c.peer)
		}
		return &Denial{http.StatusForbidden, fmt.Sprintf("%s routes need root or the agent's user (uid %d), not %s", a, self, who)}
	}
	return nil
}
