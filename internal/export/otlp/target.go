package otlp

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
)

// Scheme is the target URL scheme of this exporter.
const Scheme = "otlp"

// DefaultPort is the IANA-assigned OTLP/gRPC port, used when the target
// names none.
const DefaultPort = 4317

// Target is a parsed `otlp://HOST:PORT` target.
type Target struct {
	Host string // a name or an IP literal, without brackets
	Port int
}

// Addr is the target in the host:port form gRPC dials (IPv6 bracketed).
func (t Target) Addr() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// String is the target in URL form, as ParseTarget accepts it.
func (t Target) String() string { return Scheme + "://" + t.Addr() }

// ParseTarget parses `otlp://HOST[:PORT]`. The port defaults to 4317.
//
// It is strict on purpose: a path, query, user or fragment would be silently
// ignored by gRPC, and an operator who wrote `otlp://host:4318/v1/logs`
// meant OTLP/HTTP, which this exporter does not speak; failing at start
// names the mistake instead of exporting nothing.
func ParseTarget(s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Target{}, fmt.Errorf("otlp target %q: %w", s, err)
	}
	if u.Scheme != Scheme {
		return Target{}, fmt.Errorf("otlp target %q: scheme must be %q (OTLP over gRPC)", s, Scheme+"://")
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Target{}, fmt.Errorf("otlp target %q: want otlp://HOST:PORT and nothing else (OTLP/gRPC has no path)", s)
	}
	host := u.Hostname()
	if host == "" {
		return Target{}, fmt.Errorf("otlp target %q: no host", s)
	}
	port := DefaultPort
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Target{}, fmt.Errorf("otlp target %q: port %q is not in 1-65535", s, p)
		}
		port = n
	} else if u.Host != host && u.Host != "["+host+"]" {
		// "otlp://host:" has an empty port, which url.Parse accepts.
		return Target{}, fmt.Errorf("otlp target %q: empty port", s)
	}
	return Target{Host: host, Port: port}, nil
}
