package targets

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"loupe/internal/config"
)

func TestOpenEveryScheme(t *testing.T) {
	cfg := config.Default()
	log := slog.New(slog.DiscardHandler)
	for _, target := range []string{
		"ipfix+udp://127.0.0.1:4739",
		"ipfix+tcp://[::1]:4739",
		"kafka://127.0.0.1:9092/flows?format=json",
		"otlp://127.0.0.1:4317",
	} {
		s, q, err := Open(target, cfg, log)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if q == nil || s.Name() != target || q.Stats().Capacity != cfg.Delivery.QueueSize {
			t.Fatalf("%s: sink %q, queue %v", target, s.Name(), q)
		}
		// Nothing was written: closing delivers nothing and drops nothing.
		if err := s.Close(); err != nil {
			t.Fatalf("%s: close: %v", target, err)
		}
	}
	path := filepath.Join(t.TempDir(), "flows.jsonl")
	s, q, err := Open("json:"+path, cfg, log)
	if err != nil || q != nil {
		t.Fatalf("json: %v %v", err, q)
	}
	s.Close()
}

func TestOpenErrors(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cfg := config.Default()
	cfg.Kafka.SASL.Mechanism = "plain"
	cfg.Kafka.SASL.Username = "loupe"
	for _, tc := range []struct {
		target, want string
		cfg          config.Config
	}{
		{"sflow://h:6343", `unsupported sink`, config.Default()},
		{"kafka://127.0.0.1:9092/flows", "needs kafka.sasl.username and kafka.sasl.password_file", cfg},
		{"json:" + filepath.Join(t.TempDir(), "no", "such", "dir", "f"), "no such file or directory", config.Default()},
	} {
		if _, _, err := Open(tc.target, tc.cfg, log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.target, err, tc.want)
		}
	}
	cfg.Kafka.SASL.PasswordFile = filepath.Join(t.TempDir(), "missing")
	if _, _, err := Open("kafka://127.0.0.1:9092/flows", cfg, log); err == nil || !strings.Contains(err.Error(), "kafka.sasl.password_file") {
		t.Errorf("missing password file: %v", err)
	}
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("secret\n"), 0o600)
	cfg.Kafka.SASL.PasswordFile = pw
	opts, err := kafkaOptions(cfg.Kafka, log)
	if err != nil || opts.SASL.Password != "secret" || opts.SASL.Username != "loupe" {
		t.Errorf("kafka options %+v, %v: want the password without its newline", opts.SASL, err)
	}
}
