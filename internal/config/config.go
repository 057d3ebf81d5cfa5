// Package config builds the configuration of `loupe run`.
//
// Each key can come from four layers; a later layer overrides an earlier one:
//
//  1. defaults (Default),
//  2. the YAML file named by --config,
//  3. LOUPE_* environment variables,
//  4. command-line flags the user actually set.
//
// Every key is declared once, as a field of Config whose struct tags give its
// YAML key, environment variable, flag name and help text; the loader, the
// flag binding and the YAML dump are all driven by that one declaration, so a
// new key cannot be half-wired.
//
// Unknown YAML keys (at any depth) and unknown LOUPE_* variables are errors,
// because a misspelt key silently falling back to its default is the kind of
// mistake that is only discovered in production. Every value is checked in
// the layer it comes from, so an error names its source: the file and line,
// the environment variable, or the flag.
package config

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// None is the value of store.path and listen that disables the store and
// the HTTP listener.
const None = "none"

// Config is the effective configuration of the agent.
//
// Tags: yaml is the file key, env the environment variable, flag the flag
// name, help its description and arg the placeholder shown in the flag
// usage for flags whose type the flag package cannot name. Field types
// choose the syntax: []string is a list (comma-separated in env and flags),
// time.Duration uses Go syntax (5s, 1m30s), uint64 is a byte size (4096,
// 64KiB, 4MiB, 1GiB).
type Config struct {
	Interfaces         []string      `yaml:"interfaces" env:"LOUPE_INTERFACES" flag:"iface" arg:"glob" help:"interface name glob to capture on, e.g. eth* (empty: every interface except loopback)"`
	Exclude            []string      `yaml:"exclude" env:"LOUPE_EXCLUDE" flag:"exclude" arg:"glob" help:"interface name glob to skip even if it matches an --iface glob"`
	CacheActiveTimeout time.Duration `yaml:"cache_active_timeout" env:"LOUPE_CACHE_ACTIVE_TIMEOUT" flag:"cache-active-timeout" help:"export long-lived flows at least this often, 10ms..1h"`
	FlowBudget         int           `yaml:"flow_budget" env:"LOUPE_FLOW_BUDGET" flag:"flow-budget" help:"max distinct flows in the kernel map per eviction interval, 16..16777216"`
	RingbufSize        uint64        `yaml:"ringbuf_size" env:"LOUPE_RINGBUF_SIZE" flag:"ringbuf-size" arg:"size" help:"ring buffer size in bytes or with a KiB/MiB/GiB suffix; a power of two, 4KiB..1GiB"`
	MapType            string        `yaml:"map_type" env:"LOUPE_MAP_TYPE" flag:"map-type" help:"kernel flow map type: auto, percpu or shared"`
	AttachMode         string        `yaml:"attach_mode" env:"LOUPE_ATTACH_MODE" flag:"attach-mode" help:"how to attach to interfaces: auto, tcx or tc"`
	AttachPosition     string        `yaml:"attach_position" env:"LOUPE_ATTACH_POSITION" flag:"attach-position" help:"where to attach among other programs: head or tail"`
	Store              Store         `yaml:"store"`
	Listen             string        `yaml:"listen" env:"LOUPE_LISTEN" flag:"listen" help:"HTTP listen address host:port, or none to disable"`
	Export             []string      `yaml:"export" env:"LOUPE_EXPORT" flag:"export" arg:"target" help:"target to export flows to: ipfix+udp://HOST:PORT, ipfix+tcp://HOST:PORT, kafka://BROKER[,BROKER]/TOPIC[?format=protobuf|json], otlp://HOST:PORT, json:PATH or json:- (stdout)"`
	Delivery           Delivery      `yaml:"delivery"`
	IPFIX              IPFIX         `yaml:"ipfix"`
	Kafka              Kafka         `yaml:"kafka"`
	OTLP               OTLP          `yaml:"otlp"`
	Prometheus         Prometheus    `yaml:"prometheus"`
	LogLevel           string        `yaml:"log_level" env:"LOUPE_LOG_LEVEL" flag:"log-level" help:"log level: debug, info, warn or error"`
	LogFormat          string        `yaml:"log_format" env:"LOUPE_LOG_FORMAT" flag:"log-format" help:"log format: text or json"`
}

// Store configures the local flow store.
type Store struct {
	Path      string        `yaml:"path" env:"LOUPE_STORE_PATH" flag:"store" help:"flow store directory, or none to disable the store"`
	Retention time.Duration `yaml:"retention" env:"LOUPE_STORE_RETENTION" flag:"store-retention" help:"how long the store keeps flows, at least 1m"`
	MaxSize   uint64        `yaml:"max_size" env:"LOUPE_STORE_MAX_SIZE" flag:"store-max-size" arg:"size" help:"the store's largest size in bytes or with a KiB/MiB/GiB suffix; past it the oldest segments are deleted; 0 (no limit) or at least 1MiB"`
}

// Delivery tunes the queue in front of every network exporter (IPFIX,
// Kafka, OTLP): each exporter has its own queue with these settings.
type Delivery struct {
	QueueSize       int           `yaml:"queue_size" env:"LOUPE_EXPORT_QUEUE_SIZE" flag:"export-queue-size" help:"flow records each network exporter holds while its collector is slow or away; more are dropped and counted, 1..16777216"`
	BatchSize       int           `yaml:"batch_size" env:"LOUPE_EXPORT_BATCH_SIZE" flag:"export-batch-size" help:"most flow records per send, 1..queue_size"`
	MaxLinger       time.Duration `yaml:"max_linger" env:"LOUPE_EXPORT_MAX_LINGER" flag:"export-max-linger" help:"longest a record waits for a fuller batch, 1ms..1m"`
	RetryMax        time.Duration `yaml:"retry_max" env:"LOUPE_EXPORT_RETRY_MAX" flag:"export-retry-max" help:"longest back-off between retries of a failed send, 100ms..10m"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" env:"LOUPE_EXPORT_SHUTDOWN_TIMEOUT" flag:"export-shutdown-timeout" help:"how long shutdown waits for exporters to deliver what they hold, 0s..10m"`
}

// IPFIX configures the ipfix+udp and ipfix+tcp exporters.
type IPFIX struct {
	MTU               int           `yaml:"mtu" env:"LOUPE_IPFIX_MTU" flag:"ipfix-mtu" help:"largest IPFIX message in bytes, 512..65535, or 0 for 1400 over UDP (fits a 1500-byte path) and 8192 over TCP"`
	TemplateRefresh   time.Duration `yaml:"template_refresh" env:"LOUPE_IPFIX_TEMPLATE_REFRESH" flag:"ipfix-template-refresh" help:"how often templates are resent over UDP (also after every 100 messages), 1s..24h"`
	ObservationDomain int           `yaml:"observation_domain" env:"LOUPE_IPFIX_OBSERVATION_DOMAIN" flag:"ipfix-observation-domain" help:"IPFIX observation domain ID, 1..4294967295"`
	EnterpriseNumber  int           `yaml:"enterprise_number" env:"LOUPE_IPFIX_ENTERPRISE_NUMBER" flag:"ipfix-enterprise-number" help:"private enterprise number of Loupe's own information elements (32473 is the documentation PEN of RFC 5612), 1..4294967295"`
}

// Kafka configures the kafka:// exporter.
type Kafka struct {
	Compression   string        `yaml:"compression" env:"LOUPE_KAFKA_COMPRESSION" flag:"kafka-compression" help:"record batch compression: none, gzip, snappy, lz4 or zstd"`
	BatchMaxBytes uint64        `yaml:"batch_max_bytes" env:"LOUPE_KAFKA_BATCH_MAX_BYTES" arg:"size" flag:"kafka-batch-max-bytes" help:"largest record batch sent to one partition, a size 1KiB..64MiB"`
	Linger        time.Duration `yaml:"linger" env:"LOUPE_KAFKA_LINGER" flag:"kafka-linger" help:"how long the producer waits to fill a partition's batch, 0s..10s (0: send as soon as the delivery queue hands over a batch)"`
	ClientID      string        `yaml:"client_id" env:"LOUPE_KAFKA_CLIENT_ID" flag:"kafka-client-id" help:"client ID sent to the brokers"`
	TLS           TLS           `yaml:"tls" env:"LOUPE_KAFKA_TLS_" flag:"kafka-tls-"`
	SASL          SASL          `yaml:"sasl"`
}

// SASL configures Kafka authentication.
type SASL struct {
	Mechanism    string `yaml:"mechanism" env:"LOUPE_KAFKA_SASL_MECHANISM" flag:"kafka-sasl-mechanism" help:"SASL mechanism: none, plain, scram-sha-256 or scram-sha-512"`
	Username     string `yaml:"username" env:"LOUPE_KAFKA_SASL_USERNAME" flag:"kafka-sasl-username" help:"SASL user name"`
	PasswordFile string `yaml:"password_file" env:"LOUPE_KAFKA_SASL_PASSWORD_FILE" flag:"kafka-sasl-password-file" help:"file holding the SASL password (never given inline, so it stays out of process listings and config dumps)"`
}

// OTLP configures the otlp:// exporter.
type OTLP struct {
	Compression string   `yaml:"compression" env:"LOUPE_OTLP_COMPRESSION" flag:"otlp-compression" help:"gRPC compression: none or gzip"`
	Headers     []string `yaml:"headers" env:"LOUPE_OTLP_HEADERS" flag:"otlp-header" arg:"key=value" help:"gRPC metadata key=value sent with every export, e.g. for a collector's auth"`
	TLS         TLS      `yaml:"tls" env:"LOUPE_OTLP_TLS_" flag:"otlp-tls-"`
}

// TLS configures a client's TLS. Its env and flag tags are suffixes of the
// section's (LOUPE_KAFKA_TLS_ + CA_FILE, kafka-tls- + ca-file).
type TLS struct {
	Enabled            bool   `yaml:"enabled" env:"ENABLED" flag:"enabled" help:"connect with TLS"`
	CAFile             string `yaml:"ca_file" env:"CA_FILE" flag:"ca-file" help:"PEM file of the CAs that sign the server's certificate (default: the system's)"`
	CertFile           string `yaml:"cert_file" env:"CERT_FILE" flag:"cert-file" help:"PEM client certificate, for mutual TLS"`
	KeyFile            string `yaml:"key_file" env:"KEY_FILE" flag:"key-file" help:"PEM key of cert_file"`
	ServerName         string `yaml:"server_name" env:"SERVER_NAME" flag:"server-name" help:"name to verify the server's certificate against (default: the host dialled)"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" env:"INSECURE_SKIP_VERIFY" flag:"insecure-skip-verify" help:"accept any server certificate (testing only)"`
}

// Prometheus configures the flow metrics on the HTTP listener.
type Prometheus struct {
	MaxSeries  int      `yaml:"max_series" env:"LOUPE_PROMETHEUS_MAX_SERIES" flag:"prometheus-max-series" help:"hard cap on flow metric label sets; past it new ones fold into an \"other\" series, 1..1000000"`
	Keys       []string `yaml:"keys" env:"LOUPE_PROMETHEUS_KEYS" flag:"prometheus-key" arg:"key" help:"extra aggregation key (label) of the flow metrics: src_port, dst_port, src_group, dst_group, eth_type, dscp"`
	CIDRGroups []string `yaml:"cidr_groups" env:"LOUPE_PROMETHEUS_CIDR_GROUPS" flag:"prometheus-cidr-group" arg:"name=cidr" help:"named address group for src_group and dst_group, as name=cidr; repeat a name to add prefixes; the longest prefix wins"`
}

// Default returns the configuration used when nothing overrides a key.
func Default() Config {
	return Config{
		CacheActiveTimeout: 5 * time.Second,
		FlowBudget:         65536,
		RingbufSize:        1 << 20,
		MapType:            "auto",
		AttachMode:         "auto",
		AttachPosition:     "head",
		Store: Store{
			Path:      "/var/lib/loupe/flows",
			Retention: 24 * time.Hour,
			MaxSize:   0, // no limit
		},
		Listen: "127.0.0.1:9464",
		Delivery: Delivery{
			QueueSize:       65536,
			BatchSize:       4096,
			MaxLinger:       time.Second,
			RetryMax:        30 * time.Second,
			ShutdownTimeout: 5 * time.Second,
		},
		IPFIX: IPFIX{
			TemplateRefresh:   time.Minute,
			ObservationDomain: 1,
			EnterpriseNumber:  32473,
		},
		Kafka: Kafka{
			Compression:   "zstd",
			BatchMaxBytes: 1 << 20,
			ClientID:      "loupe",
			SASL:          SASL{Mechanism: "none"},
		},
		OTLP:       OTLP{Compression: "none"},
		Prometheus: Prometheus{MaxSeries: 4096},
		LogLevel:   "info",
		LogFormat:  "text",
	}
}

// String returns c as a YAML document that Load accepts back unchanged;
// `loupe run --print-config` prints it.
func (c Config) String() string {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	// Encoding a tree of plain string scalars cannot fail.
	if err := enc.Encode(c.node()); err != nil {
		return fmt.Sprintf("config: %v", err)
	}
	_ = enc.Close()
	return buf.String()
}

// MarshalYAML makes yaml.Marshal use the same syntax as String (durations as
// "5s", sizes as "4MiB") rather than raw integers that Load would reject.
func (c Config) MarshalYAML() (any, error) {
	return c.node(), nil
}

// node builds the YAML tree of c, keys in declaration order.
func (c *Config) node() *yaml.Node {
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range fields() {
		parent := root
		parts := strings.Split(f.key, ".")
		for _, p := range parts[:len(parts)-1] {
			parent = childMapping(parent, p)
		}
		parent.Content = append(parent.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: parts[len(parts)-1]},
			valueNode(f.kind, f.get(c)))
	}
	return root
}

// childMapping returns the mapping under key in m, adding it if missing.
func childMapping(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	child := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, child)
	return child
}

func valueNode(k kind, v any) *yaml.Node {
	switch k {
	case kindList:
		// Flow style keeps short glob lists on one line and prints an
		// empty list as [] rather than as null.
		n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, s := range v.([]string) {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
		}
		return n
	case kindInt:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: formatText(k, v)}
	case kindBool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: formatText(k, v)}
	case kindSize:
		if s := formatText(k, v); !strings.HasSuffix(s, "B") {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: s}
		}
	}
	// The !!str tag makes the encoder quote values such as "123" that
	// would otherwise read back as another type.
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: formatText(k, v)}
}
