package config

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"loupe/internal/api"
	"loupe/internal/capability/capture"
	dnsunit "loupe/internal/capability/dns"
	latencyunit "loupe/internal/capability/latency"
	rulesunit "loupe/internal/capability/rules"
	signalsunit "loupe/internal/capability/signals"
	"loupe/internal/config/check"
	"loupe/internal/export/delivery"
	"loupe/internal/export/ipfix"
	"loupe/internal/export/kafka"
	"loupe/internal/export/otlp"
	"loupe/internal/export/promflow"
	"loupe/internal/export/targets"
	"loupe/internal/hop"
	"loupe/internal/k8s"
	"loupe/internal/ui"
)

// run loads a configuration the way `loupe run` does: file (if yamlText is
// not empty), environment, then command-line args. It returns the file path
// so that tests can check error messages name it.
func run(t *testing.T, yamlText string, env []string, args ...string) (Config, string, error) {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := BindFlags(fs)
	var path string
	if yamlText != "" {
		path = filepath.Join(t.TempDir(), "loupe.yaml")
		if err := os.WriteFile(path, []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, path, err
	}
	cfg, err := Load(f, env)
	return cfg, path, err
}

// fieldByKey returns the descriptor of a YAML key, failing the test if the
// key does not exist.
func fieldByKey(t *testing.T, key string) field {
	t.Helper()
	for _, f := range fields() {
		if f.key == key {
			return f
		}
	}
	t.Fatalf("no key %q", key)
	return field{}
}

// yamlFor renders key=text as a YAML document, nesting dotted keys and
// turning comma-separated text into a list for list keys.
func yamlFor(t *testing.T, key, text string) string {
	t.Helper()
	value := strconv.Quote(text)
	if fieldByKey(t, key).kind == kindList {
		var q []string
		for _, e := range strings.Split(text, ",") {
			q = append(q, strconv.Quote(e))
		}
		value = "[" + strings.Join(q, ", ") + "]"
	}
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts[:len(parts)-1] {
		b.WriteString(strings.Repeat("  ", i) + p + ":\n")
	}
	b.WriteString(strings.Repeat("  ", len(parts)-1) + parts[len(parts)-1] + ": " + value + "\n")
	return b.String()
}

func TestDefault(t *testing.T) {
	want := Config{
		CacheActiveTimeout: 5 * time.Second,
		RingbufSize:        1024 * 1024,
		MapType:            "auto",
		AttachMode:         "auto",
		AttachPosition:     "head",
		PinDir:             "/sys/fs/bpf/loupe",
		Store:              Store{Path: "/var/lib/loupe/flows", Retention: 24 * time.Hour},
		Listen:             "127.0.0.1:9464",
		Control:            api.Config{Socket: "/run/loupe/loupe.sock", Listen: "none"},
		UI:                 ui.Config{Listen: "127.0.0.1:9463"},
		Capture: capture.Config{MaxTriggersPerSec: 100, Connections: 16384, KeepPackets: 4, KeepBytes: 2048,
			KeepSlots: 1024, IdleTimeout: 30 * time.Second, MaxAge: time.Hour, HTTPMaxSeries: 4096, BufferSize: 4 << 20,
			FileMaxSize: 100 << 20, FileMaxAge: time.Hour, MaxFiles: 100, MaxSize: 1 << 30},
		Rules:   rulesunit.Config{Reload: 2 * time.Second, MaxSeries: 1000},
		Signals: signalsunit.Config{RTT: true, Retransmits: true, Drops: true, TableSize: 16384},
		DNS: dnsunit.Config{Enabled: true, HandshakeRTT: true, Timeout: 5 * time.Second, MaxPending: 4096, MaxFlows: 8192,
			HandshakeMaxPending: 8192},
		Latency:    latencyunit.Config{UntracedSampling: 16, HeaderScanLimit: 16 << 10, ScanTableSize: 16384, RingSize: 1 << 20, Matching: hop.DefaultConfig()},
		Kubernetes: k8s.Config{History: 10 * time.Minute},
		Exporters: targets.Exporters{
			Delivery: delivery.Config{QueueSize: 65536, BatchSize: 4096, MaxLinger: time.Second,
				RetryMax: 30 * time.Second, ShutdownTimeout: 5 * time.Second},
			IPFIX: ipfix.Config{TemplateRefresh: time.Minute, ObservationDomain: 1, EnterpriseNumber: 32473},
			Kafka: kafka.Config{Compression: "zstd", BatchMaxBytes: 1 << 20,
				ClientID: "loupe", SASL: kafka.SASLConfig{Mechanism: "none"}},
			OTLP: otlp.Config{Compression: "none"},
		},
		Prometheus: promflow.Config{MaxSeries: 4096},
		LogLevel:   "info",
		LogFormat:  "text",
	}
	d := Default()
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("Default() = %+v, want %+v", d, want)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	for _, tc := range []struct {
		name string
		load func() (Config, error)
	}{
		{"nil flags", func() (Config, error) { return Load(nil, nil) }},
		{"no args", func() (Config, error) { c, _, err := run(t, "", nil); return c, err }},
		{"empty file", func() (Config, error) { c, _, err := run(t, "# nothing here\n", nil); return c, err }},
		{"null values", func() (Config, error) {
			c, _, err := run(t, "flow_budget: ~\nstore:\ninterfaces:\n", nil)
			return c, err
		}},
		{"other env vars", func() (Config, error) {
			return Load(nil, []string{"PATH=/bin", "loupe_flow_budget=1", "XLOUPE_FLOW_BUDGET=1", "LOUPE"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.load()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want defaults", got)
			}
		})
	}
}

// keyCases sets each key to a non-default value through each source. text
// is the env/flag form; lists are comma-separated.
type keyCase struct {
	key  string
	text string
	want func(*Config)
}

func keyCases() []keyCase {
	return []keyCase{
		{"interfaces", "eth*,veth*", func(c *Config) { c.Interfaces = []string{"eth*", "veth*"} }},
		{"exclude", "veth*,docker?", func(c *Config) { c.Exclude = []string{"veth*", "docker?"} }},
		{"cache_active_timeout", "250ms", func(c *Config) { c.CacheActiveTimeout = 250 * time.Millisecond }},
		{"flow_budget", "1024", func(c *Config) { c.FlowBudget = 1024 }},
		{"ringbuf_size", "8MiB", func(c *Config) { c.RingbufSize = 8 << 20 }},
		{"memory", "16MiB", func(c *Config) { c.Memory = 16 << 20 }},
		{"map_type", "percpu", func(c *Config) { c.MapType = "percpu" }},
		{"attach_mode", "tcx", func(c *Config) { c.AttachMode = "tcx" }},
		{"attach_position", "tail", func(c *Config) { c.AttachPosition = "tail" }},
		{"pin_dir", "/run/loupe-pins", func(c *Config) { c.PinDir = "/run/loupe-pins" }},
		{"store.path", "/srv/flows", func(c *Config) { c.Store.Path = "/srv/flows" }},
		{"store.retention", "2h30m", func(c *Config) { c.Store.Retention = 150 * time.Minute }},
		{"store.max_size", "512MiB", func(c *Config) { c.Store.MaxSize = 512 << 20 }},
		{"listen", "[::1]:9000", func(c *Config) { c.Listen = "[::1]:9000" }},
		{"control.socket", "/run/loupe-b/api.sock", func(c *Config) { c.Control.Socket = "/run/loupe-b/api.sock" }},
		{"control.listen", "127.0.0.1:9465", func(c *Config) { c.Control.Listen = "127.0.0.1:9465" }},
		{"control.token_file", "/etc/loupe/token", func(c *Config) { c.Control.TokenFile = "/etc/loupe/token" }},
		{"ui.listen", "127.0.0.1:9470", func(c *Config) { c.UI.Listen = "127.0.0.1:9470" }},
		{"capture.dir", "/var/lib/loupe/capture", func(c *Config) { c.Capture.Dir = "/var/lib/loupe/capture" }},
		{"capture.triggers", "http.status=503 sample=1/10,tcp.rst", func(c *Config) { c.Capture.Triggers = []string{"http.status=503 sample=1/10", "tcp.rst"} }},
		{"capture.mirror", "dbg0", func(c *Config) { c.Capture.Mirror = "dbg0" }},
		{"capture.follow", "true", func(c *Config) { c.Capture.Follow = true }},
		{"capture.snaplen", "128", func(c *Config) { c.Capture.Snaplen = 128 }},
		{"capture.max_triggers_per_second", "5", func(c *Config) { c.Capture.MaxTriggersPerSec = 5 }},
		{"capture.connections", "1024", func(c *Config) { c.Capture.Connections = 1024 }},
		{"capture.keep_packets", "2", func(c *Config) { c.Capture.KeepPackets = 2 }},
		{"capture.keep_bytes", "512", func(c *Config) { c.Capture.KeepBytes = 512 }},
		{"capture.keep_slots_per_cpu", "64", func(c *Config) { c.Capture.KeepSlots = 64 }},
		{"capture.idle_timeout", "10s", func(c *Config) { c.Capture.IdleTimeout = 10 * time.Second }},
		{"capture.max_connection_age", "2h", func(c *Config) { c.Capture.MaxAge = 2 * time.Hour }},
		{"capture.http_max_series", "100", func(c *Config) { c.Capture.HTTPMaxSeries = 100 }},
		{"capture.buffer_size", "8MiB", func(c *Config) { c.Capture.BufferSize = 8 << 20 }},
		{"capture.file_max_size", "10MiB", func(c *Config) { c.Capture.FileMaxSize = 10 << 20 }},
		{"capture.file_max_age", "10m", func(c *Config) { c.Capture.FileMaxAge = 10 * time.Minute }},
		{"capture.max_files", "7", func(c *Config) { c.Capture.MaxFiles = 7 }},
		{"capture.max_size", "2GiB", func(c *Config) { c.Capture.MaxSize = 2 << 30 }},
		{"rules.file", "/etc/loupe/rules", func(c *Config) { c.Rules.File = "/etc/loupe/rules" }},
		{"rules.enabled", "true", func(c *Config) { c.Rules.Enabled = true }},
		{"rules.reload_interval", "5s", func(c *Config) { c.Rules.Reload = 5 * time.Second }},
		{"rules.max_series", "10", func(c *Config) { c.Rules.MaxSeries = 10 }},
		{"signals.rtt", "false", func(c *Config) { c.Signals.RTT = false }},
		{"signals.retransmits", "false", func(c *Config) { c.Signals.Retransmits = false }},
		{"signals.drops", "false", func(c *Config) { c.Signals.Drops = false }},
		{"signals.table_size", "1024", func(c *Config) { c.Signals.TableSize = 1024 }},
		{"dns.enabled", "false", func(c *Config) { c.DNS.Enabled = false }},
		{"dns.handshake_rtt", "false", func(c *Config) { c.DNS.HandshakeRTT = false }},
		{"dns.timeout", "2s", func(c *Config) { c.DNS.Timeout = 2 * time.Second }},
		{"dns.max_pending", "100", func(c *Config) { c.DNS.MaxPending = 100 }},
		{"latency.enabled", "true", func(c *Config) { c.Latency.Enabled = true }},
		{"latency.sampling", "100", func(c *Config) { c.Latency.Sampling = 100 }},
		{"latency.untraced_sampling", "1", func(c *Config) { c.Latency.UntracedSampling = 1 }},
		{"latency.header_scan_limit", "32768", func(c *Config) { c.Latency.HeaderScanLimit = 32 << 10 }},
		{"latency.scan_table_size", "1000", func(c *Config) { c.Latency.ScanTableSize = 1000 }},
		{"latency.table_size", "1000", func(c *Config) { c.Latency.Matching.TableSize = 1000 }},
		{"latency.ring_size", "2097152", func(c *Config) { c.Latency.RingSize = 2 << 20 }},
		{"latency.match_window", "50ms", func(c *Config) { c.Latency.Matching.MatchWindow = 50 * time.Millisecond }},
		{"latency.clock_sync", "true", func(c *Config) { c.Latency.Matching.ClockSync = true }},
		{"latency.max_pairs", "64", func(c *Config) { c.Latency.Matching.MaxPairs = 64 }},
		{"latency.node_name", "node-a", func(c *Config) { c.Latency.Matching.NodeName = "node-a" }},
		{"dns.max_flows", "200", func(c *Config) { c.DNS.MaxFlows = 200 }},
		{"dns.handshake_max_pending", "300", func(c *Config) { c.DNS.HandshakeMaxPending = 300 }},
		{"kubernetes.kubeconfig", "/etc/loupe/kubeconfig", func(c *Config) { c.Kubernetes.Kubeconfig = "/etc/loupe/kubeconfig" }},
		{"kubernetes.node_name", "node-1", func(c *Config) { c.Kubernetes.NodeName = "node-1" }},
		{"kubernetes.history", "1m", func(c *Config) { c.Kubernetes.History = time.Minute }},
		{"export", "json:/var/log/flows.json,json:-", func(c *Config) { c.Export = []string{"json:/var/log/flows.json", "json:-"} }},
		{"delivery.queue_size", "1000", func(c *Config) { c.Delivery.QueueSize = 1000 }},
		{"delivery.batch_size", "100", func(c *Config) { c.Delivery.BatchSize = 100 }},
		{"delivery.max_linger", "50ms", func(c *Config) { c.Delivery.MaxLinger = 50 * time.Millisecond }},
		{"delivery.retry_max", "1m", func(c *Config) { c.Delivery.RetryMax = time.Minute }},
		{"delivery.shutdown_timeout", "0s", func(c *Config) { c.Delivery.ShutdownTimeout = 0 }},
		{"ipfix.mtu", "9000", func(c *Config) { c.IPFIX.MTU = 9000 }},
		{"ipfix.template_refresh", "30s", func(c *Config) { c.IPFIX.TemplateRefresh = 30 * time.Second }},
		{"ipfix.observation_domain", "4294967295", func(c *Config) { c.IPFIX.ObservationDomain = 1<<32 - 1 }},
		{"ipfix.enterprise_number", "12345", func(c *Config) { c.IPFIX.EnterpriseNumber = 12345 }},
		{"kafka.compression", "lz4", func(c *Config) { c.Kafka.Compression = "lz4" }},
		{"kafka.batch_max_bytes", "4MiB", func(c *Config) { c.Kafka.BatchMaxBytes = 4 << 20 }},
		{"kafka.linger", "5ms", func(c *Config) { c.Kafka.Linger = 5 * time.Millisecond }},
		{"kafka.client_id", "node-7", func(c *Config) { c.Kafka.ClientID = "node-7" }},
		{"kafka.tls.enabled", "true", func(c *Config) { c.Kafka.TLS.Enabled = true }},
		{"kafka.tls.ca_file", "/etc/ca.pem", func(c *Config) { c.Kafka.TLS.CAFile = "/etc/ca.pem" }},
		{"kafka.tls.cert_file", "/etc/c.pem", func(c *Config) { c.Kafka.TLS.CertFile = "/etc/c.pem" }},
		{"kafka.tls.key_file", "/etc/k.pem", func(c *Config) { c.Kafka.TLS.KeyFile = "/etc/k.pem" }},
		{"kafka.tls.server_name", "kafka.example", func(c *Config) { c.Kafka.TLS.ServerName = "kafka.example" }},
		{"kafka.tls.insecure_skip_verify", "true", func(c *Config) { c.Kafka.TLS.InsecureSkipVerify = true }},
		{"kafka.sasl.mechanism", "scram-sha-512", func(c *Config) { c.Kafka.SASL.Mechanism = "scram-sha-512" }},
		{"kafka.sasl.username", "loupe", func(c *Config) { c.Kafka.SASL.Username = "loupe" }},
		{"kafka.sasl.password_file", "/run/secrets/kafka", func(c *Config) { c.Kafka.SASL.PasswordFile = "/run/secrets/kafka" }},
		{"otlp.compression", "gzip", func(c *Config) { c.OTLP.Compression = "gzip" }},
		{"otlp.headers", "authorization=Bearer x,x-tenant=a", func(c *Config) { c.OTLP.Headers = []string{"authorization=Bearer x", "x-tenant=a"} }},
		{"otlp.headers_file", "/run/secrets/otlp", func(c *Config) { c.OTLP.HeadersFile = "/run/secrets/otlp" }},
		{"otlp.tls.enabled", "true", func(c *Config) { c.OTLP.TLS.Enabled = true }},
		{"otlp.tls.ca_file", "/etc/ca.pem", func(c *Config) { c.OTLP.TLS.CAFile = "/etc/ca.pem" }},
		{"otlp.tls.cert_file", "/etc/c.pem", func(c *Config) { c.OTLP.TLS.CertFile = "/etc/c.pem" }},
		{"otlp.tls.key_file", "/etc/k.pem", func(c *Config) { c.OTLP.TLS.KeyFile = "/etc/k.pem" }},
		{"otlp.tls.server_name", "otel.example", func(c *Config) { c.OTLP.TLS.ServerName = "otel.example" }},
		{"otlp.tls.insecure_skip_verify", "true", func(c *Config) { c.OTLP.TLS.InsecureSkipVerify = true }},
		{"prometheus.max_series", "100", func(c *Config) { c.Prometheus.MaxSeries = 100 }},
		{"prometheus.keys", "dst_port,dscp", func(c *Config) { c.Prometheus.Keys = []string{"dst_port", "dscp"} }},
		{"prometheus.cidr_groups", "lan=10.0.0.0/8,lan=fd00::/8", func(c *Config) { c.Prometheus.CIDRGroups = []string{"lan=10.0.0.0/8", "lan=fd00::/8"} }},
		{"log_level", "debug", func(c *Config) { c.LogLevel = "debug" }},
		{"log_format", "json", func(c *Config) { c.LogFormat = "json" }},
	}
}

func TestEachKeyFromEachSource(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range keyCases() {
		covered[tc.key] = true
		f := fieldByKey(t, tc.key)
		want := Default()
		tc.want(&want)
		sources := map[string]func() (Config, string, error){
			"file": func() (Config, string, error) { return run(t, yamlFor(t, tc.key, tc.text), nil) },
			"env":  func() (Config, string, error) { return run(t, "", []string{f.env + "=" + tc.text}) },
			// --flag=value: a boolean flag takes no separate argument.
			"flag": func() (Config, string, error) { return run(t, "", nil, "--"+f.flag+"="+tc.text) },
		}
		for name, load := range sources {
			t.Run(tc.key+"/"+name, func(t *testing.T) {
				got, _, err := load()
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("got %+v\nwant %+v", got, want)
				}
			})
		}
	}
	for _, f := range fields() {
		if !covered[f.key] {
			t.Errorf("key %s has no case in keyCases", f.key)
		}
	}
}

func TestPrecedence(t *testing.T) {
	const file = "flow_budget: 100\ninterfaces: [file0]\nstore:\n  path: /file\n"
	for _, tc := range []struct {
		name      string
		file      string
		env       []string
		args      []string
		budget    int
		ifaces    []string
		storePath string
	}{
		{"file", file, nil, nil, 100, []string{"file0"}, "/file"},
		{"env beats file", file, []string{"LOUPE_FLOW_BUDGET=200", "LOUPE_INTERFACES=env0"}, nil, 200, []string{"env0"}, "/file"},
		{"flag beats env and file", file, []string{"LOUPE_FLOW_BUDGET=200", "LOUPE_INTERFACES=env0"},
			[]string{"--flow-budget", "300", "--iface", "flag0"}, 300, []string{"flag0"}, "/file"},
		{"flag beats file", file, nil, []string{"--flow-budget=300", "--store", "/flag"}, 300, []string{"file0"}, "/flag"},
		{"flag beats env", "", []string{"LOUPE_FLOW_BUDGET=200", "LOUPE_STORE_PATH=/env"},
			[]string{"--flow-budget", "300"}, 300, nil, "/env"},
		{"flag set to the default still wins", file, []string{"LOUPE_FLOW_BUDGET=200"},
			[]string{"--flow-budget", "65536"}, 65536, []string{"file0"}, "/file"},
		{"empty env clears a file list", file, []string{"LOUPE_INTERFACES="}, nil, 100, nil, "/file"},
		{"flag list replaces, not appends", file, []string{"LOUPE_INTERFACES=env0,env1"},
			[]string{"--iface", "flag0"}, 100, []string{"flag0"}, "/file"},
		{"last env entry wins", "", []string{"LOUPE_FLOW_BUDGET=200", "LOUPE_FLOW_BUDGET=250"}, nil, 250, nil, "/var/lib/loupe/flows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := run(t, tc.file, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got.FlowBudget != tc.budget || !slices.Equal(got.Interfaces, tc.ifaces) || got.Store.Path != tc.storePath {
				t.Fatalf("got flow_budget=%d interfaces=%q store.path=%q, want %d %q %q",
					got.FlowBudget, got.Interfaces, got.Store.Path, tc.budget, tc.ifaces, tc.storePath)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  bool
	}{
		{"4096", 4096, false},
		{"4KiB", 4096, false},
		{"4MiB", 4 << 20, false},
		{"1GiB", 1 << 30, false},
		{" 64 KiB ", 64 << 10, false},
		{"0", 0, false},
		{"18446744073709551615", 1<<64 - 1, false},
		{"4MB", 0, true},
		{"4M", 0, true},
		{"4mib", 0, true},
		{"1.5MiB", 0, true},
		{"-4096", 0, true},
		{"", 0, true},
		{"MiB", 0, true},
		{"0x1000", 0, true},
		{"18446744073709551616", 0, true},
		{"17179869184GiB", 0, true}, // 2^34 GiB = 2^64 bytes
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := check.ParseSize(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("parseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
			}
			if err == nil {
				if back, err := check.ParseSize(check.FormatSize(got)); err != nil || back != got {
					t.Fatalf("FormatSize(%d) = %q does not parse back", got, check.FormatSize(got))
				}
			}
		})
	}
	// A size in YAML may be an integer or a string.
	for _, doc := range []string{"ringbuf_size: 4096\n", "ringbuf_size: \"4KiB\"\n", "ringbuf_size: 4KiB\n"} {
		c, _, err := run(t, doc, nil)
		if err != nil || c.RingbufSize != 4096 {
			t.Errorf("%q: got %d, %v; want 4096", doc, c.RingbufSize, err)
		}
	}
}

func TestLists(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"env comma-separated with spaces", []string{"LOUPE_INTERFACES= eth*, veth* ,,wl*,"}, nil, []string{"eth*", "veth*", "wl*"}},
		{"env empty", []string{"LOUPE_INTERFACES="}, nil, nil},
		{"flag repeated", nil, []string{"--iface", "eth0", "--iface", "eth1"}, []string{"eth0", "eth1"}},
		{"flag repeated and comma-separated", nil, []string{"--iface", "eth0,eth1", "--iface=wl*"}, []string{"eth0", "eth1", "wl*"}},
		{"flag empty clears", []string{"LOUPE_INTERFACES=eth0"}, []string{"--iface", ""}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := run(t, "", tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Interfaces, tc.want) {
				t.Fatalf("interfaces = %#v, want %#v", c.Interfaces, tc.want)
			}
		})
	}
	c, _, err := run(t, "", []string{"LOUPE_EXPORT=json:-,json:/tmp/a.json"}, "--exclude", "veth*", "--exclude", "docker0,br-*")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"json:-", "json:/tmp/a.json"}; !slices.Equal(c.Export, want) {
		t.Errorf("export = %q, want %q", c.Export, want)
	}
	if want := []string{"veth*", "docker0", "br-*"}; !slices.Equal(c.Exclude, want) {
		t.Errorf("exclude = %q, want %q", c.Exclude, want)
	}
}

// TestExportSyntax checks that a target is checked (by the targets
// package's table, which has the cases) in each layer, the error naming the
// key and the offending value.
func TestExportSyntax(t *testing.T) {
	_, _, err := run(t, "", nil, "--export", "json:-", "--export", "kafka://b:9092")
	if err == nil || !strings.Contains(err.Error(), `config: flag --export: export: invalid target "kafka://b:9092": no topic`) {
		t.Fatalf("error %v", err)
	}
}

func TestNoneValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		env  []string
		args []string
	}{
		{"file", "listen: none\nstore:\n  path: none\n", nil, nil},
		{"env", "", []string{"LOUPE_LISTEN=none", "LOUPE_STORE_PATH=none"}, nil},
		{"flag", "", nil, []string{"--listen", "none", "--store", "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := run(t, tc.yaml, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if c.Listen != None || c.Store.Path != None {
				t.Fatalf("listen=%q store.path=%q, want %q", c.Listen, c.Store.Path, None)
			}
		})
	}
	for _, addr := range []string{":9464", "0.0.0.0:0", "[::]:65535", "localhost:9464"} {
		if err := checkListen(addr); err != nil {
			t.Errorf("checkListen(%q) = %v", addr, err)
		}
	}
}

func TestFlagHelp(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	BindFlags(fs)
	fs.PrintDefaults()
	help := out.String()
	for _, f := range fields() {
		fl := fs.Lookup(f.flag)
		if fl == nil {
			t.Errorf("no flag --%s for %s", f.flag, f.key)
			continue
		}
		if want := "(" + f.key + ", " + f.env + ")"; !strings.Contains(fl.Usage, want) {
			t.Errorf("--%s usage %q lacks %q", f.flag, fl.Usage, want)
		}
	}
	for _, want := range []string{
		"-flow-budget int\n    \tmax distinct flows a kernel table holds per eviction interval (per CPU with per-CPU tables), 16..16777216; 0: sized from memory, or 65536 without it (per CPU on up to 2 CPUs, 131072 split among more, with per-CPU tables; given with memory, it wins and the sketch gets the rest) (flow_budget, LOUPE_FLOW_BUDGET)\n",
		"-memory size\n",
		"-ringbuf-size size\n", "(default 1MiB)",
		"-iface glob\n", "repeatable, comma-separated (interfaces, LOUPE_INTERFACES)\n",
		"-exclude glob\n", "-export target\n", "-cache-active-timeout duration\n",
		"-store string\n", "(store.path, LOUPE_STORE_PATH) (default \"/var/lib/loupe/flows\")",
		"-config file\n", "-print-config\n",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}

func TestPrintConfig(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f := BindFlags(fs)
	if f.PrintConfig() {
		t.Fatal("PrintConfig before parsing")
	}
	if err := fs.Parse([]string{"--print-config"}); err != nil {
		t.Fatal(err)
	}
	if !f.PrintConfig() || (*Flags)(nil).PrintConfig() {
		t.Fatal("PrintConfig does not reflect --print-config")
	}

	// The dump reads back to the same configuration.
	custom := Default()
	for _, tc := range keyCases() {
		tc.want(&custom)
	}
	custom.Listen = "none"
	for name, c := range map[string]Config{"default": Default(), "custom": custom} {
		t.Run(name, func(t *testing.T) {
			// Secrets come back redacted, and only they differ.
			want := c
			want.OTLP.Headers = nil
			for _, h := range c.OTLP.Headers {
				k, _, _ := strings.Cut(h, "=")
				want.OTLP.Headers = append(want.OTLP.Headers, k+"="+Redacted)
			}
			got, _, err := run(t, c.String(), nil)
			if err != nil {
				t.Fatalf("%v\n%s", err, c.String())
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip: got %+v\nwant %+v\nYAML:\n%s", got, want, c.String())
			}
			// yaml.Marshal uses the same syntax (its own indentation).
			out, err := yaml.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			got = Default()
			if err := decodeYAML(&got, out); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("yaml.Marshal round trip: got %+v, %v\nYAML:\n%s", got, err, out)
			}
		})
	}
	for _, want := range []string{"ringbuf_size: 1MiB\n", "retention: 24h\n", "interfaces: []\n", "cache_active_timeout: 5s\n"} {
		if s := Default().String(); !strings.Contains(s, want) {
			t.Errorf("Default().String() lacks %q:\n%s", want, s)
		}
	}
}

func TestFieldTags(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range fields() {
		for _, name := range []string{"yaml " + f.key, "env " + f.env, "flag " + f.flag} {
			if seen[name] {
				t.Errorf("duplicate %s", name)
			}
			seen[name] = true
		}
		if !strings.HasPrefix(f.env, envPrefix) {
			t.Errorf("%s: env %s lacks the %s prefix", f.key, f.env, envPrefix)
		}
		if f.arg != "" && !strings.Contains(f.help, f.arg) {
			t.Errorf("%s: help %q does not contain its arg %q", f.key, f.help, f.arg)
		}
	}
}

func TestExportListKeepsKafkaBrokerLists(t *testing.T) {
	const text = "kafka://b1:9092,[::1]:9092/flows?format=json,otlp://o:4317,kafka://k:9092,k2:9092/t2,json:-"
	want := []string{"kafka://b1:9092,[::1]:9092/flows?format=json", "otlp://o:4317", "kafka://k:9092,k2:9092/t2", "json:-"}
	for name, args := range map[string][]string{
		"flag":          {"--export", text},
		"repeated flag": {"--export", "kafka://b1:9092,[::1]:9092/flows?format=json", "--export", "otlp://o:4317,kafka://k:9092,k2:9092/t2,json:-"},
	} {
		c, _, err := run(t, "", nil, args...)
		if err != nil || !slices.Equal(c.Export, want) {
			t.Errorf("%s: export %q, %v; want %q", name, c.Export, err, want)
		}
	}
	c, _, err := run(t, "", []string{"LOUPE_EXPORT=" + text})
	if err != nil || !slices.Equal(c.Export, want) {
		t.Errorf("env: export %q, %v; want %q", c.Export, err, want)
	}
	// Interface globs are split at every comma, as before.
	c, _, err = run(t, "", nil, "--iface", "eth*,veth*")
	if err != nil || !slices.Equal(c.Interfaces, []string{"eth*", "veth*"}) {
		t.Errorf("iface %q, %v", c.Interfaces, err)
	}
}

// TestControlSection checks the control API's keys: their names in each
// layer, none for the socket, and that listen may be set without
// token_file here (the agent refuses it at start, naming the key).
func TestControlSection(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		env  []string
		args []string
		want api.Config
	}{
		{"file", "control:\n  socket: /srv/l.sock\n  listen: 127.0.0.1:0\n  token_file: /etc/t\n", nil, nil,
			api.Config{Socket: "/srv/l.sock", Listen: "127.0.0.1:0", TokenFile: "/etc/t"}},
		{"env", "", []string{"LOUPE_CONTROL_SOCKET=none", "LOUPE_CONTROL_LISTEN=[::1]:9465", "LOUPE_CONTROL_TOKEN_FILE=/etc/t"}, nil,
			api.Config{Socket: "none", Listen: "[::1]:9465", TokenFile: "/etc/t"}},
		{"flags", "control:\n  socket: /srv/l.sock\n", nil, []string{"--control", "none", "--control-listen", "127.0.0.1:9465", "--control-token-file", "/t"},
			api.Config{Socket: "none", Listen: "127.0.0.1:9465", TokenFile: "/t"}},
		{"listen alone", "", []string{"LOUPE_CONTROL_LISTEN=127.0.0.1:9465"}, nil,
			api.Config{Socket: "/run/loupe/loupe.sock", Listen: "127.0.0.1:9465"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := run(t, tc.yaml, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if c.Control != tc.want {
				t.Fatalf("control = %+v, want %+v", c.Control, tc.want)
			}
		})
	}
	_, path, err := run(t, "control:\n  sockets: /x\n", nil)
	checkErr(t, "file", err, "config file "+path+": line 2: unknown key \"control.sockets\"")

	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	BindFlags(fs)
	fs.PrintDefaults()
	for _, want := range []string{
		"-control path\n", "(control.socket, LOUPE_CONTROL_SOCKET) (default \"/run/loupe/loupe.sock\")",
		"-control-listen string\n", "(control.listen, LOUPE_CONTROL_LISTEN) (default \"none\")",
		"-control-token-file file\n", "(control.token_file, LOUPE_CONTROL_TOKEN_FILE)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	if s := Default().String(); !strings.Contains(s, "control:\n  socket: /run/loupe/loupe.sock\n  listen: none\n  token_file: \"\"\n") {
		t.Errorf("Default().String() lacks the control section:\n%s", s)
	}
}
