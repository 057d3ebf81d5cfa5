// Package tlsconf is the client TLS section the exporters share (kafka.tls,
// otlp.tls): one set of keys, one reading of CA, certificate and key files,
// one minimum version, the same errors.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"loupe/internal/config/check"
)

// Config is the TLS section of one client. Its env and flag tags are
// suffixes of the enclosing section's (LOUPE_KAFKA_TLS_ + CA_FILE,
// kafka-tls- + ca-file).
type Config struct {
	Enabled bool `yaml:"enabled" env:"ENABLED" flag:"enabled" help:"connect with TLS"`
	// CAFile is a PEM bundle of the CAs to trust instead of the system's.
	CAFile string `yaml:"ca_file" env:"CA_FILE" flag:"ca-file" help:"PEM file of the CAs that sign the server's certificate (default: the system's)"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that authenticate clients by certificate; both or neither.
	CertFile string `yaml:"cert_file" env:"CERT_FILE" flag:"cert-file" help:"PEM client certificate, for mutual TLS"`
	KeyFile  string `yaml:"key_file" env:"KEY_FILE" flag:"key-file" help:"PEM key of cert_file"`
	// ServerName overrides the name verified in the server's certificate
	// (default: the host dialled).
	ServerName string `yaml:"server_name" env:"SERVER_NAME" flag:"server-name" help:"name to verify the server's certificate against (default: the host dialled)"`
	// InsecureSkipVerify accepts any server certificate (tests only).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify" env:"INSECURE_SKIP_VERIFY" flag:"insecure-skip-verify" help:"accept any server certificate (testing only)"`
}

// maxServerName is the longest DNS name.
const maxServerName = 253

// CheckKey checks the value of one key of the section (relative to it):
// paths and the server name are bounded, so that a mistaken value fails
// at start rather than in a message that shows it whole.
func (c Config) CheckKey(key string) error {
	switch key {
	case "ca_file":
		return check.Path(c.CAFile)
	case "cert_file":
		return check.Path(c.CertFile)
	case "key_file":
		return check.Path(c.KeyFile)
	case "server_name":
		if len(c.ServerName) > maxServerName {
			return fmt.Errorf("%d bytes long: a DNS name has at most %d", len(c.ServerName), maxServerName)
		}
	}
	return nil
}

// On reports whether TLS is wanted: Enabled, or implied by any other
// setting, since a CA file or a client certificate has no meaning over
// plaintext and silently sending in clear would be the worse mistake.
func (c Config) On() bool {
	return c.Enabled || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" ||
		c.ServerName != "" || c.InsecureSkipVerify
}

// Validate checks what no single key can: a client certificate needs its
// key and a key its certificate. The message names the key relative to
// the section (key_file), for the caller to prefix.
func (c Config) Validate() error {
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return errors.New("key_file: must be set with cert_file (a client certificate needs its key)")
	case c.KeyFile != "" && c.CertFile == "":
		return errors.New("cert_file: must be set with key_file (a client key needs its certificate)")
	}
	return nil
}

// ClientConfig reads the files and returns the client configuration, TLS
// 1.2 or later.
func (c Config) ClientConfig() (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify, //nolint:gosec // an operator's explicit choice, documented as for tests
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca file %s: no PEM certificate in it", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both a cert file and a key file")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
