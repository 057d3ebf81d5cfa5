package targets

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestOpenEveryScheme(t *testing.T) {
	cfg := Default()
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
	cfg := Default()
	cfg.Kafka.SASL.Mechanism = "plain"
	cfg.Kafka.SASL.Username = "loupe"
	for _, tc := range []struct {
		target, want string
		cfg          Exporters
	}{
		{"sflow://h:6343", `unsupported sink`, Default()},
		{"kafka://127.0.0.1:9092/flows", "kafka.sasl.mechanism: plain needs sasl.username and sasl.password_file", cfg},
		{"json:" + filepath.Join(t.TempDir(), "no", "such", "dir", "f"), "no such file or directory", Default()},
	} {
		if _, _, err := Open(tc.target, tc.cfg, log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.target, err, tc.want)
		}
	}
	cfg.Kafka.SASL.PasswordFile = filepath.Join(t.TempDir(), "missing")
	if _, _, err := Open("kafka://127.0.0.1:9092/flows", cfg, log); err == nil || !strings.Contains(err.Error(), "kafka.sasl.password_file") {
		t.Errorf("missing password file: %v", err)
	}
	cfg.Kafka.SASL.PasswordFile = "/dev/zero"
	if _, _, err := Open("kafka://127.0.0.1:9092/flows", cfg, log); err == nil || !strings.Contains(err.Error(), "kafka.sasl.password_file: larger than 64KiB") {
		t.Errorf("/dev/zero as password file: %v", err)
	}
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("secret\n"), 0o600)
	cfg.Kafka.SASL.PasswordFile = pw
	opts, err := cfg.Kafka.Options(log)
	if err != nil || opts.SASL.Password != "secret" || opts.SASL.Username != "loupe" {
		t.Errorf("kafka options %+v, %v: want the password without its newline", opts.SASL, err)
	}
}

// TestCheckSyntax checks targets with the parsers that open them: the
// configuration and the exporter cannot disagree on what a target is.
func TestCheckSyntax(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   string // "" = valid
	}{
		{"json:-", ""},
		{"json:/var/log/loupe/flows.json", ""},
		{"json:flows.json", ""},
		{"json:", `invalid target "json:": missing path (want json:PATH or json:- (stdout))`},
		{"json", "missing path"},
		{"", `unknown sink ""`},
		{"JSON:-", `unknown sink "JSON:-"`},
		{"ipfix+udp://collector:4739", ""},
		{"ipfix+tcp://[2001:db8::1]:4739", ""},
		{"ipfix+udp://collector", `invalid port ""`},
		{"ipfix+udp://collector:0", `invalid port "0"`},
		{"ipfix+udp://:4739", "missing host"},
		{"ipfix+udp:collector:4739", "missing //"},
		{"ipfix+sctp://collector:4739", `unknown sink "ipfix+sctp://collector:4739"`},
		{"otlp://localhost:4317", ""},
		{"otlp://localhost", ""}, // the OTLP/gRPC port, 4317
		{"otlp://localhost:4317/v1/logs", "OTLP/gRPC has no path"},
		{"kafka://b1:9092,b2:9092/flows", ""},
		{"kafka://b1:9092/flows?format=json", ""},
		{"kafka://[::1]:9092,b2:9092/flows", ""},
		{"kafka://b1:9092,[2001:db8::1]:9092/flows?format=protobuf", ""},
		{"kafka://b1:9092/flows?format=avro", `unknown format "avro"`},
		{"kafka://b1:9092/flows?acks=0", `unknown option "acks"`},
		{"kafka://b1:9092", `invalid target "kafka://b1:9092": no topic (want kafka://BROKER[,BROKER]/TOPIC[?format=protobuf|json])`},
		{"kafka://b1/flows", `broker "b1": want HOST:PORT`},
		{"kafka://user:pw@b1:9092/flows", "credentials do not belong in the target"},
		{"/var/log/flows.json", `unknown sink "/var/log/flows.json"`},
		{"kafka://b:9092/" + strings.Repeat("t", 20<<20), `"... (20971535 bytes): topic is 20971520 characters long`},
	} {
		name := tc.target
		if len(name) > 80 {
			name = name[:80]
		}
		t.Run(name, func(t *testing.T) {
			err := Check(tc.target)
			if tc.want == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if err != nil && len(err.Error()) > 400 {
				t.Fatalf("error of %d bytes: a long value is not cut", len(err.Error()))
			}
		})
	}
	if err := CheckList([]string{"json:-", "otlp://o:4317", "json:-"}); err == nil || err.Error() != `duplicate target "json:-"` {
		t.Fatalf("duplicate: %v", err)
	}
}

// TestHelpNamesEveryScheme keeps the --export help in step with the table.
func TestHelpNamesEveryScheme(t *testing.T) {
	f, _ := reflect.TypeFor[Exporters]().FieldByName("Export")
	help := f.Tag.Get("help")
	for _, s := range schemes() {
		for _, form := range strings.Split(s.syntax, " or ") {
			if !strings.Contains(help, form) {
				t.Errorf("--export help %q lacks %q", help, form)
			}
		}
	}
}
