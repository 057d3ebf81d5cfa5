package ipfix

import (
	"log/slog"
	"time"

	"loupe/internal/config/check"
)

// Schemes are the target URL schemes of this exporter, and Syntax their
// forms as errors and help show them.
const (
	SchemeUDP = "ipfix+udp"
	SchemeTCP = "ipfix+tcp"
	SyntaxUDP = SchemeUDP + "://HOST:PORT"
	SyntaxTCP = SchemeTCP + "://HOST:PORT"
)

// Config is the ipfix section of the agent's configuration, shared by the
// ipfix+udp and ipfix+tcp exporters. The tags are read by the config
// package: yaml is the key, env and flag its environment variable and
// flag, help the flag's description.
type Config struct {
	MTU               int           `yaml:"mtu" env:"LOUPE_IPFIX_MTU" flag:"ipfix-mtu" help:"largest IPFIX message in bytes, 512..65535, or 0 for 1400 over UDP (fits a 1500-byte path) and 8192 over TCP"`
	TemplateRefresh   time.Duration `yaml:"template_refresh" env:"LOUPE_IPFIX_TEMPLATE_REFRESH" flag:"ipfix-template-refresh" help:"how often templates are resent over UDP (also after every 100 messages), 1s..24h"`
	ObservationDomain int           `yaml:"observation_domain" env:"LOUPE_IPFIX_OBSERVATION_DOMAIN" flag:"ipfix-observation-domain" help:"IPFIX observation domain ID, 1..4294967295"`
	EnterpriseNumber  int           `yaml:"enterprise_number" env:"LOUPE_IPFIX_ENTERPRISE_NUMBER" flag:"ipfix-enterprise-number" help:"private enterprise number of Loupe's own information elements (32473 is the documentation PEN of RFC 5612), 1..4294967295"`
}

// DefaultConfig returns the section's defaults, those of Options (MTU 0
// picks the transport's default).
func DefaultConfig() Config {
	return Config{
		TemplateRefresh:   DefaultTemplateRefresh,
		ObservationDomain: DefaultObservationDomain,
		EnterpriseNumber:  DefaultEnterpriseNumber,
	}
}

// CheckKey checks the value of one key of the section (relative to it).
// The message does not name the key: the config package prefixes it with
// the key and the layer it came from.
func (c Config) CheckKey(key string) error {
	switch key {
	case "mtu":
		if c.MTU != 0 {
			return checkMTU(c.MTU)
		}
	case "template_refresh":
		return check.Duration(c.TemplateRefresh, time.Second, 24*time.Hour)
	case "observation_domain", "enterprise_number":
		n := c.ObservationDomain
		if key == "enterprise_number" {
			n = c.EnterpriseNumber
		}
		return check.Int(n, 1, 1<<32-1)
	}
	return nil
}

// checkMTU applies the one bound on a message's size: RFC 7011's 512 bytes
// (and at least what the templates and one record need), at most the
// header's 16-bit length.
func checkMTU(mtu int) error {
	// The templates' size does not depend on the enterprise number.
	low := max(minMessageLen, minMaxLen(DefaultEnterpriseNumber))
	return check.Int(mtu, low, maxMessageLen)
}

// Options returns the client options of the section.
func (c Config) Options(log *slog.Logger) Options {
	return Options{
		ObservationDomain: uint32(c.ObservationDomain),
		MTU:               c.MTU,
		TemplateRefresh:   c.TemplateRefresh,
		EnterpriseNumber:  uint32(c.EnterpriseNumber),
		Logger:            log,
	}
}
