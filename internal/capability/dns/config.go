package dns

import (
	"time"

	"loupe/internal/config/check"
	"loupe/internal/datapath"
)

// Config is the dns section of the agent's configuration, owned by this
// package (the config package embeds it, as the capture's and the rules').
//
// Both signals are on by default: at the TC hook they need nothing the
// kernel may refuse beyond what flows needs, and switched on they cost
// every other packet two comparisons (DNS) or a look at its TCP flags
// (the handshake); a pure ACK costs the handshake a table lookup.
type Config struct {
	Enabled             bool          `yaml:"enabled" env:"LOUPE_DNS_ENABLED" flag:"dns-enabled" help:"DNS latency, response code and query name per flow, from queries and responses on UDP and TCP port 53 at the TC hook"`
	HandshakeRTT        bool          `yaml:"handshake_rtt" env:"LOUPE_DNS_HANDSHAKE_RTT" flag:"dns-handshake-rtt" help:"TCP handshake RTT per flow (SYN to SYN-ACK to ACK at the TC hook), also for traffic the host only forwards"`
	Timeout             time.Duration `yaml:"timeout" env:"LOUPE_DNS_TIMEOUT" flag:"dns-timeout" help:"a DNS query without a response this long is reported as a timeout on its flow, 100ms..1m"`
	MaxPending          int           `yaml:"max_pending" env:"LOUPE_DNS_MAX_PENDING" flag:"dns-max-pending" help:"DNS queries awaiting their response at once, 16..1048576; past it, queries are counted and not timed"`
	MaxFlows            int           `yaml:"max_flows" env:"LOUPE_DNS_MAX_FLOWS" flag:"dns-max-flows" help:"flows with a DNS result, and flows with a handshake RTT, per interval, 16..1048576; past it, results are counted and lost"`
	HandshakeMaxPending int           `yaml:"handshake_max_pending" env:"LOUPE_DNS_HANDSHAKE_MAX_PENDING" flag:"dns-handshake-max-pending" help:"TCP handshakes in progress followed at once (an LRU: past it, the oldest is forgotten), 16..1048576"`
}

// DefaultConfig is the section's defaults: both signals on.
func DefaultConfig() Config {
	d, h := datapath.DefaultDNSSizes(), datapath.DefaultHandshakeSizes()
	return Config{Enabled: true, HandshakeRTT: true, Timeout: 5 * time.Second,
		MaxPending: d.Pending, MaxFlows: d.Flows, HandshakeMaxPending: h.Pending}
}

// Any reports whether either signal is on.
func (c Config) Any() bool { return c.Enabled || c.HandshakeRTT }

// DNSSizes and HandshakeSizes size the datapath's tables.
func (c Config) DNSSizes() datapath.DNSSizes {
	return datapath.DNSSizes{Pending: c.MaxPending, Flows: c.MaxFlows}
}

// HandshakeSizes sizes the handshake's tables.
func (c Config) HandshakeSizes() datapath.HandshakeSizes {
	return datapath.HandshakeSizes{Pending: c.HandshakeMaxPending, Flows: c.MaxFlows}
}

// CheckKey checks one key of the section; the message does not name it.
func (c Config) CheckKey(key string) error {
	switch key {
	case "timeout":
		return check.Duration(c.Timeout, 100*time.Millisecond, time.Minute)
	case "max_pending":
		return check.Int(c.MaxPending, 16, 1<<20)
	case "max_flows":
		return check.Int(c.MaxFlows, 16, 1<<20)
	case "handshake_max_pending":
		return check.Int(c.HandshakeMaxPending, 16, 1<<20)
	}
	return nil
}
