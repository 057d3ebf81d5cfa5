package ipfix

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Target is a collector address: the transport and host:port.
type Target struct {
	Network string // "udp" or "tcp"
	Address string // host:port, IPv6 hosts in brackets
}

// String returns the target in URL form, as ParseTarget accepts it.
func (t Target) String() string { return "ipfix+" + t.Network + "://" + t.Address }

// ParseTarget parses ipfix+udp://HOST:PORT or ipfix+tcp://HOST:PORT. IPv6
// hosts are written in brackets (ipfix+udp://[2001:db8::1]:4739). The port
// is required: IANA's 4739 is a convention collectors do not all follow.
func ParseTarget(s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, fmt.Errorf("ipfix target %q: %w", s, err)
	}
	var t Target
	switch strings.ToLower(u.Scheme) {
	case "ipfix+udp":
		t.Network = "udp"
	case "ipfix+tcp":
		t.Network = "tcp"
	default:
		return Target{}, fmt.Errorf("ipfix target %q: scheme must be ipfix+udp or ipfix+tcp", s)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return Target{}, fmt.Errorf("ipfix target %q: want only HOST:PORT after the scheme", s)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return Target{}, fmt.Errorf("ipfix target %q: missing host", s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return Target{}, fmt.Errorf("ipfix target %q: want a port in 1-65535", s)
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "[") {
		return Target{}, fmt.Errorf("ipfix target %q: write IPv6 hosts in brackets", s)
	}
	t.Address = net.JoinHostPort(host, port)
	return t, nil
}
