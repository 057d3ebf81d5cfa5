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
	Export             []string      `yaml:"export" env:"LOUPE_EXPORT" flag:"export" arg:"target" help:"sink target to export flows to: json:PATH or json:- (stdout)"`
	LogLevel           string        `yaml:"log_level" env:"LOUPE_LOG_LEVEL" flag:"log-level" help:"log level: debug, info, warn or error"`
	LogFormat          string        `yaml:"log_format" env:"LOUPE_LOG_FORMAT" flag:"log-format" help:"log format: text or json"`
}

// Store configures the local flow store.
type Store struct {
	Path      string        `yaml:"path" env:"LOUPE_STORE_PATH" flag:"store" help:"flow store directory, or none to disable the store"`
	Retention time.Duration `yaml:"retention" env:"LOUPE_STORE_RETENTION" flag:"store-retention" help:"how long the store keeps flows, at least 1m"`
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
		},
		Listen:    "127.0.0.1:9464",
		LogLevel:  "info",
		LogFormat: "text",
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
	case kindSize:
		if s := formatText(k, v); !strings.HasSuffix(s, "B") {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: s}
		}
	}
	// The !!str tag makes the encoder quote values such as "123" that
	// would otherwise read back as another type.
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: formatText(k, v)}
}
