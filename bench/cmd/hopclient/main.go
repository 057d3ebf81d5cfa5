// Command hopclient sends HTTP/1.1 requests that carry a W3C traceparent
// after a block of other headers, for the per-hop latency benchmark: the
// trace context where the seed's scanner found nothing (past its first 800
// bytes), and, with -split, each request written in two writes (TCP_NODELAY,
// Go's default) so that its headers straddle two segments. It prints one
// line per request: trace id, parent span id, local port, status.
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "", "server HOST:PORT")
	n := flag.Int("n", 100, "requests")
	pad := flag.Int("pad", 2048, "bytes of other headers before traceparent")
	split := flag.Bool("split", false, "write each request in two writes, cut in the middle of its headers")
	conns := flag.Int("conns", 4, "requests are spread over this many keep-alive connections")
	flag.Parse()
	if err := run(*addr, *n, *pad, *split, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "hopclient:", err)
		os.Exit(1)
	}
}

func run(addr string, n, pad int, split bool, conns int) error {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	cs := make([]net.Conn, conns)
	rs := make([]*bufio.Reader, conns)
	for i := range cs {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		cs[i], rs[i] = c, bufio.NewReader(c)
	}
	for i := range n {
		c, r := cs[i%conns], rs[i%conns]
		trace, span := randHex(16), randHex(8)
		req := request(addr, pad, trace, span)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		parts := [][]byte{req}
		if split {
			parts = [][]byte{req[:pad/2], req[pad/2:]}
		}
		for j, p := range parts {
			if _, err := c.Write(p); err != nil {
				return err
			}
			if j == 0 && len(parts) > 1 {
				time.Sleep(time.Millisecond) // the first part leaves alone
			}
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Fprintf(out, "%s\t%s\t%d\t%d\n", trace, span, c.LocalAddr().(*net.TCPAddr).Port, resp.StatusCode)
	}
	return nil
}

// request is GET /foo with pad bytes of X-Pad headers, then traceparent.
func request(host string, pad int, trace, span string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "GET /foo HTTP/1.1\r\nHost: %s\r\n", host)
	for i := 0; b.Len() < pad; i++ {
		fmt.Fprintf(&b, "X-Pad-%d: %s\r\n", i, strings.Repeat("p", 100))
	}
	fmt.Fprintf(&b, "traceparent: 00-%s-%s-01\r\n\r\n", trace, span)
	return []byte(b.String())
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
