package otlp

import (
	"strings"
	"testing"
	"time"

	"loupe/internal/export/tlsconf"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in       string
		host     string
		port     int
		addr     string
		errMatch string
	}{
		{in: "otlp://collector:4317", host: "collector", port: 4317, addr: "collector:4317"},
		{in: "otlp://10.0.0.5:14317", host: "10.0.0.5", port: 14317, addr: "10.0.0.5:14317"},
		{in: "otlp://[2001:db8::1]:4317", host: "2001:db8::1", port: 4317, addr: "[2001:db8::1]:4317"},
		{in: "otlp://collector", host: "collector", port: 4317, addr: "collector:4317"},
		{in: "otlp://[::1]", host: "::1", port: 4317, addr: "[::1]:4317"},
		{in: "otlp://collector:4317/", host: "collector", port: 4317, addr: "collector:4317"},
		{in: "otlp://collector:", errMatch: "empty port"},
		{in: "otlp://collector:0", errMatch: "not in 1-65535"},
		{in: "otlp://collector:65536", errMatch: "not in 1-65535"},
		{in: "otlp://collector:http", errMatch: "port"},
		{in: "otlp://:4317", errMatch: "no host"},
		{in: "http://collector:4318", errMatch: "scheme"},
		{in: "collector:4317", errMatch: "scheme"},
		{in: "otlp://collector:4318/v1/logs", errMatch: "no path"},
		{in: "otlp://user@collector:4317", errMatch: "nothing else"},
		{in: "otlp://collector:4317?tls=1", errMatch: "nothing else"},
	} {
		got, err := ParseTarget(tc.in)
		if tc.errMatch != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
				t.Errorf("ParseTarget(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.errMatch)
			}
			continue
		}
		if err != nil || got.Host != tc.host || got.Port != tc.port || got.Addr() != tc.addr {
			t.Errorf("ParseTarget(%q) = %+v (addr %q), %v; want %s %d %s", tc.in, got, got.Addr(), err, tc.host, tc.port, tc.addr)
		}
		if again, err := ParseTarget(got.String()); err != nil || again != got {
			t.Errorf("ParseTarget(%q.String() = %q) = %+v, %v; not a round trip", tc.in, got.String(), again, err)
		}
	}
}

func TestOptionsDefaultsAndValidation(t *testing.T) {
	o, err := (&Options{HostName: "h"}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Timeout != 10*time.Second || o.MaxRequestRecords != 1000 || o.MetricsInterval != 10*time.Second ||
		o.MaxMetricStreams != 1024 || o.Compression != "none" || o.Logger == nil || o.Now == nil {
		t.Fatalf("defaults: %+v", o)
	}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Compression: "zstd"}, `compression "zstd"`},
		{Options{MaxRequestRecords: 4001}, "max request records 4001"},
		{Options{MaxRequestRecords: -1}, "max request records -1"},
		{Options{Timeout: -time.Second}, "timeout"},
		{Options{MaxMetricStreams: -1}, "max metric streams"},
		{Options{TLS: tlsconf.Config{CertFile: "/c.pem"}}, "tls.key_file: must be set with cert_file"},
		{Options{TLS: tlsconf.Config{Enabled: true, KeyFile: "/k.pem"}}, "tls.cert_file: must be set with key_file"},
		{Options{Headers: map[string]string{"x tenant": "a"}}, `header "x tenant"`},
		{Options{Headers: map[string]string{"grpc-timeout": "1S"}}, "reserved"},
		{Options{Headers: map[string]string{"authorization": "Bearer \n"}}, "printable"},
	} {
		tc.opts.HostName = "h"
		if _, err := New("otlp://127.0.0.1:4317", tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): err %v, want one containing %q", tc.opts, err, tc.want)
		}
	}
	if _, err := New("otlp://127.0.0.1:4317", Options{HostName: "h", TLS: tlsconf.Config{CAFile: "/nonexistent/ca.pem"}}); err == nil || !strings.Contains(err.Error(), "tls ca file") {
		t.Errorf("missing CA file: err %v", err)
	}
}

func TestTransportNames(t *testing.T) {
	for proto, want := range map[uint8]string{1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp", 132: "sctp", 136: "udplite", 47: "gre", 50: "esp", 253: "253", 0: "0"} {
		if got := Transport(proto); got != want {
			t.Errorf("Transport(%d) = %q, want %q", proto, got, want)
		}
	}
}
