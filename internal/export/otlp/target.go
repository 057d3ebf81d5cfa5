package otlp

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"loupe/internal/config/check"
)

// Scheme is the target URL scheme of this exporter.
const Scheme = "otlp"

// Syntax is the form of an otlp:// target, as errors and help show it.
const Syntax = "otlp://HOST:PORT"

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
	t, err := parseTarget(s)
	if err != nil {
		return Target{}, fmt.Errorf("otlp target %s: %w", check.Quote(s), err)
	}
	return t, nil
}

// CheckTarget checks a target's syntax. Its error gives the reason alone,
// for a caller that names the target and the syntax itself.
func CheckTarget(s string) error {
	_, err := parseTarget(s)
	return err
}

func parseTarget(s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which the caller shows
		}
		return Target{}, err
	}
	if u.Scheme != Scheme {
		return Target{}, fmt.Errorf("scheme must be %q (OTLP over gRPC)", Scheme+"://")
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Target{}, errors.New("want otlp://HOST:PORT and nothing else (OTLP/gRPC has no path)")
	}
	host := u.Hostname()
	if host == "" {
		return Target{}, errors.New("no host")
	}
	port := DefaultPort
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Target{}, fmt.Errorf("port %s is not in 1-65535", check.Quote(p))
		}
		port = n
	} else if u.Host != host && u.Host != "["+host+"]" {
		// "otlp://host:" has an empty port, which url.Parse accepts.
		return Target{}, errors.New("empty port")
	}
	return Target{Host: host, Port: port}, nil
}
