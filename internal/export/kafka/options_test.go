package kafka

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"loupe/internal/export/tlsconf"
)

// newKgo builds the franz-go client New would build, to read its options.
func newKgo(t *testing.T, opts Options) *kgo.Client {
	t.Helper()
	c, err := New("kafka://127.0.0.1:1/t", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.kc
}

func TestDefaultOptions(t *testing.T) {
	kc := newKgo(t, Options{})
	for name, tc := range map[string]struct{ opt, want any }{
		"seed brokers":     {kgo.SeedBrokers, []string{"127.0.0.1:1"}},
		"topic":            {kgo.DefaultProduceTopic, "t"},
		"acks":             {kgo.RequiredAcks, kgo.AllISRAcks()},
		"idempotence off":  {kgo.DisableIdempotentWrite, false},
		"cancellation":     {kgo.AllowIdempotentProduceCancellation, true},
		"metadata min age": {kgo.MetadataMinAge, time.Second},
		"compression":      {kgo.ProducerBatchCompression, []kgo.CompressionCodec{kgo.ZstdCompression().WithLevel(1)}},
		"batch max bytes":  {kgo.ProducerBatchMaxBytes, int32(1 << 20)},
		"linger":           {kgo.ProducerLinger, time.Duration(0)},
		"delivery timeout": {kgo.RecordDeliveryTimeout, 30 * time.Second},
		"tls":              {kgo.DialTLS, false},
		"sasl":             {kgo.SASL, []sasl.Mechanism(nil)},
	} {
		if got := kc.OptValue(tc.opt); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %#v, want %#v", name, got, tc.want)
		}
	}
	if id := kc.OptValues(kgo.ClientID); !reflect.DeepEqual(id, []any{"loupe", true}) {
		t.Errorf("client id %v", id)
	}
	if _, ok := kc.OptValue(kgo.RecordPartitioner).(kgo.Partitioner); !ok {
		t.Errorf("no partitioner")
	}
}

func TestOptionsReachFranzGo(t *testing.T) {
	for _, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		want, _ := compression(name)
		kc := newKgo(t, Options{Compression: name, BatchMaxBytes: 4096, Linger: 7 * time.Millisecond,
			DeliveryTimeout: 3 * time.Second, ClientID: "agent-7"})
		if got := kc.OptValue(kgo.ProducerBatchCompression); !reflect.DeepEqual(got, []kgo.CompressionCodec{want}) {
			t.Errorf("compression %s: %#v", name, got)
		}
		if got := kc.OptValue(kgo.ProducerBatchMaxBytes); got != int32(4096) {
			t.Errorf("batch max bytes %v", got)
		}
		if got := kc.OptValue(kgo.ProducerLinger); got != 7*time.Millisecond {
			t.Errorf("linger %v", got)
		}
		if got := kc.OptValue(kgo.RecordDeliveryTimeout); got != 3*time.Second {
			t.Errorf("delivery timeout %v", got)
		}
		if got := kc.OptValue(kgo.ClientID); got != "agent-7" {
			t.Errorf("client id %v", got)
		}
	}
}

func TestSASLOptions(t *testing.T) {
	for _, tc := range []struct {
		mech, name, first string
	}{
		{SASLPlain, "PLAIN", "\x00alice\x00s3cret"},
		{SASLScramSHA256, "SCRAM-SHA-256", "n,,n=alice,r="},
		{SASLScramSHA512, "SCRAM-SHA-512", "n,,n=alice,r="},
	} {
		kc := newKgo(t, Options{SASL: SASLOptions{Mechanism: tc.mech, Username: "alice", Password: "s3cret"}})
		ms, _ := kc.OptValue(kgo.SASL).([]sasl.Mechanism)
		if len(ms) != 1 || ms[0].Name() != tc.name {
			t.Fatalf("%s: mechanisms %v", tc.mech, ms)
		}
		// The first client message carries the credentials we gave.
		_, msg, err := ms[0].Authenticate(context.Background(), "127.0.0.1:1")
		if err != nil {
			t.Fatalf("%s: %v", tc.mech, err)
		}
		if !strings.HasPrefix(string(msg), tc.first) {
			t.Errorf("%s: first message %q, want prefix %q", tc.mech, msg, tc.first)
		}
	}
}

func TestTLSOptions(t *testing.T) {
	dir := t.TempDir()
	caPEM, _, ca, caKey := makeCert(t, nil, nil, "test-ca")
	certPEM, keyPEM, _, _ := makeCert(t, ca, caKey, "loupe-client")
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile, certFile, keyFile := write("ca.pem", caPEM), write("c.pem", certPEM), write("c.key", keyPEM)

	kc := newKgo(t, Options{TLS: tlsconf.Config{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "kafka.example"}})
	cfg, _ := kc.OptValue(kgo.DialTLSConfig).(*tls.Config)
	if cfg == nil {
		t.Fatal("TLS not enabled by its files")
	}
	if cfg.ServerName != "kafka.example" || cfg.InsecureSkipVerify || cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("tls config: server name %q, insecure %v, min version %#x", cfg.ServerName, cfg.InsecureSkipVerify, cfg.MinVersion)
	}
	if len(cfg.Certificates) != 1 {
		t.Fatalf("%d client certificates, want 1", len(cfg.Certificates))
	}
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil || leaf.Subject.CommonName != "loupe-client" {
		t.Fatalf("client certificate %v: %v", leaf, err)
	}
	// The pool trusts our CA and nothing else.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: cfg.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("client cert does not verify against the configured CA: %v", err)
	}
	_, _, other, _ := makeCert(t, nil, nil, "other-ca")
	if _, err := other.Verify(x509.VerifyOptions{Roots: cfg.RootCAs}); err == nil {
		t.Errorf("a foreign CA verifies against the configured pool")
	}

	kc = newKgo(t, Options{TLS: tlsconf.Config{Enabled: true, InsecureSkipVerify: true}})
	cfg, _ = kc.OptValue(kgo.DialTLSConfig).(*tls.Config)
	if cfg == nil || !cfg.InsecureSkipVerify || cfg.RootCAs != nil || len(cfg.Certificates) != 0 {
		t.Errorf("Enable+InsecureSkipVerify gave %+v", cfg)
	}
}

func TestBadOptions(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "x.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts Options
		msg  string
	}{
		{Options{Compression: "brotli"}, `unknown compression "brotli"`},
		{Options{BatchMaxBytes: 100}, "batch max bytes 100 out of range: must be between 1KiB and 64MiB, got 100"},
		{Options{BatchMaxBytes: 64<<20 + 1}, "batch max bytes 67108865 out of range"},
		{Options{Linger: -time.Second}, "linger: must be between 0s and 10s, got -1s"},
		{Options{DeliveryTimeout: time.Millisecond}, "below franz-go's minimum"},
		{Options{SASL: SASLOptions{Mechanism: "gssapi", Username: "u"}}, `unknown sasl mechanism "gssapi"`},
		{Options{SASL: SASLOptions{Mechanism: SASLPlain}}, "no username"},
		{Options{SASL: SASLOptions{Username: "u", Password: "p"}}, "without a mechanism"},
		{Options{TLS: tlsconf.Config{CAFile: filepath.Join(dir, "missing.pem")}}, "tls ca file"},
		{Options{TLS: tlsconf.Config{CAFile: notPEM}}, "no PEM certificate"},
		{Options{TLS: tlsconf.Config{CertFile: notPEM}}, "both a cert file and a key file"},
		{Options{TLS: tlsconf.Config{CertFile: notPEM, KeyFile: notPEM}}, "tls client certificate"},
	} {
		_, err := New("kafka://k1:9092/t", tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: error %v, want %q", tc.opts, err, tc.msg)
		}
	}
}

// makeCert makes a certificate signed by parent (self-signed if nil) and
// returns its PEM, its key's PEM, the parsed certificate and its key.
func makeCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string) (certPEM, keyPEM []byte, cert *x509.Certificate, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		parent, parentKey = tmpl, key
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), cert, key
}
