package otlp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"loupe/internal/export/tlsconf"
)

// writeCerts creates a CA and a server certificate for 127.0.0.1 signed by
// it, as PEM files in dir; it returns their paths.
func writeCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "loupe test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "collector"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server.key", "EC PRIVATE KEY", keyDER)
}

// TestTLSWithHeaders runs the collector's receiver with TLS and
// include_metadata, the set-up of an authenticated collector, and checks
// that records arrive over TLS with the token the collector's auth would
// read, and that the client does not fall back to plaintext.
func TestTLSWithHeaders(t *testing.T) {
	caFile, certFile, keyFile := writeCerts(t, t.TempDir())
	var (
		mu     sync.Mutex
		tokens []string
		count  int
	)
	logs, err := consumer.NewLogs(func(ctx context.Context, ld plog.Logs) error {
		mu.Lock()
		defer mu.Unlock()
		tokens = append(tokens, client.FromContext(ctx).Metadata.Get("authorization")...)
		count += ld.LogRecordCount()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	col := startCollector(t, "", collectorConfig{logConsumer: logs, grpc: func(g *configgrpc.ServerConfig) {
		g.IncludeMetadata = true
		g.TLS = configoptional.Some(configtls.ServerConfig{Config: configtls.Config{CertFile: certFile, KeyFile: keyFile}})
	}})

	c := newTestClient(t, col.target(), Options{
		TLS: tlsconf.Config{CAFile: caFile}, DisableMetrics: true,
		Headers: map[string]string{"authorization": "Bearer t0ken"},
	})
	if failed, err := c.Send(context.Background(), manyRecords(20, 1)); err != nil || failed != nil {
		t.Fatalf("TLS Send: failed %d, err %v", len(failed), err)
	}
	mu.Lock()
	if count != 20 || len(tokens) != 1 || tokens[0] != "Bearer t0ken" {
		t.Fatalf("collector consumed %d records with tokens %q; want 20 with [Bearer t0ken]", count, tokens)
	}
	mu.Unlock()

	plain := newTestClient(t, col.target(), Options{DisableMetrics: true})
	failed, err := plain.Send(context.Background(), manyRecords(4, 1))
	if len(failed) != 4 || status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext client to a TLS collector: failed %d, err %v; want 4 failed, Unavailable", len(failed), err)
	}
	unknownCA := newTestClient(t, col.target(), Options{TLS: tlsconf.Config{Enabled: true}, DisableMetrics: true})
	failed, err = unknownCA.Send(context.Background(), manyRecords(4, 1))
	if len(failed) != 4 || status.Code(err) != codes.Unavailable {
		t.Fatalf("client without the CA: failed %d, err %v; want 4 failed, Unavailable", len(failed), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if count != 20 {
		t.Fatalf("collector consumed %d records, want still 20", count)
	}
}
