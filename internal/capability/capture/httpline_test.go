package capture

import (
	"strings"
	"testing"
)

// tcpFrame is an Ethernet frame of TCP over IPv4 (or IPv6, or behind a
// VLAN tag) carrying payload, as requestLine reads one.
func tcpFrame(l3 string, payload string) []byte {
	f := make([]byte, 12, 128)
	if l3 == "vlan" {
		f = append(f, 0x81, 0x00, 0, 7)
	}
	switch l3 {
	case "ipv6":
		f = append(f, 0x86, 0xdd)
		ip := make([]byte, 40)
		ip[0], ip[6] = 0x60, 6
		f = append(f, ip...)
	default:
		f = append(f, 0x08, 0x00)
		ip := make([]byte, 20)
		ip[0], ip[9] = 0x45, 6
		f = append(f, ip...)
	}
	tcp := make([]byte, 20)
	tcp[12] = 5 << 4
	f = append(f, tcp...)
	return append(f, payload...)
}

// TestRequestLine: the method and target of an HTTP/1.x request line at
// the start of a TCP payload, for the packet's comment; nothing for a
// response, a body, a lowercase or overlong method, a line that does not
// end in HTTP/1.x; the target cut at 200 bytes and made printable.
func TestRequestLine(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, tc := range []struct {
		name, l3, payload, want string
	}{
		{"get", "", "GET /foo HTTP/1.1\r\nHost: x\r\n\r\n", "GET /foo"},
		{"no CR", "", "POST /a/b?c=d HTTP/1.0\nHost: x\n\n", "POST /a/b?c=d"},
		{"ipv6", "ipv6", "DELETE /x HTTP/1.1\r\n", "DELETE /x"},
		{"vlan", "vlan", "PUT /y HTTP/1.1\r\n", "PUT /y"},
		{"one segment, no line end", "", "GET / HTTP/1.1", "GET /"},
		{"response", "", "HTTP/1.1 500 Internal Server Error\r\n", ""},
		{"body", "", "xxxxxxxxxxxxxxxxxxxxxxxxxxxx", ""},
		{"lowercase method", "", "get /foo HTTP/1.1\r\n", ""},
		{"method of 17 capitals", "", "ABCDEFGHIJKLMNOPQ /foo HTTP/1.1\r\n", ""},
		{"method of 16 capitals", "", "ABCDEFGHIJKLMNOP /foo HTTP/1.1\r\n", "ABCDEFGHIJKLMNOP /foo"},
		{"no version", "", "GET /foo\r\n", ""},
		{"HTTP/2", "", "GET /foo HTTP/2\r\n", ""},
		{"space first", "", " GET /foo HTTP/1.1\r\n", ""},
		{"empty", "", "", ""},
		{"long target", "", "GET /" + long + " HTTP/1.1\r\n", "GET /" + long[:199]},
		{"unprintable", "", "GET /a\x01b\xffc HTTP/1.1\r\n", "GET /a?b?c"},
	} {
		if got := requestLine(tcpFrame(tc.l3, tc.payload)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := requestLine([]byte{1, 2, 3}); got != "" {
		t.Errorf("a runt frame: %q", got)
	}
}
