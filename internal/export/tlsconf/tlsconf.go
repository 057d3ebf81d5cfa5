// Package tlsconf builds the client TLS configuration the exporters share
// (Kafka, OTLP): one reading of CA, certificate and key files, one minimum
// version, the same errors.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Options are the TLS settings of one client.
type Options struct {
	// CAFile is a PEM bundle of the CAs to trust instead of the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that authenticate clients by certificate; both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name verified in the server's certificate.
	ServerName string
	// InsecureSkipVerify accepts any server certificate (tests only).
	InsecureSkipVerify bool
}

// Config reads the files and returns the client configuration, TLS 1.2 or
// later.
func (o Options) Config() (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         o.ServerName,
		InsecureSkipVerify: o.InsecureSkipVerify, //nolint:gosec // an operator's explicit choice, documented as for tests
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca file %s: no PEM certificate in it", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both a cert file and a key file")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
