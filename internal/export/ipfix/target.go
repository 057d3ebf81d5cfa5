package ipfix

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"loupe/internal/config/check"
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
	t, err := parseTarget(s)
	if err != nil {
		return Target{}, fmt.Errorf("ipfix target %s: %w", check.Quote(s), err)
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
	var t Target
	switch strings.ToLower(u.Scheme) {
	case SchemeUDP:
		t.Network = "udp"
	case SchemeTCP:
		t.Network = "tcp"
	default:
		return Target{}, errors.New("scheme must be ipfix+udp or ipfix+tcp")
	}
	if u.Opaque != "" {
		return Target{}, errors.New("missing // after the scheme")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Target{}, errors.New("want only HOST:PORT after the scheme")
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return Target{}, errors.New("missing host")
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return Target{}, fmt.Errorf("invalid port %s: want 1-65535", check.Quote(port))
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "[") {
		return Target{}, errors.New("write IPv6 hosts in brackets")
	}
	t.Address = net.JoinHostPort(host, port)
	return t, nil
}
