// Package config builds the configuration of `loupe run`.
//
// Each key can come from four layers; a later layer overrides an earlier one:
//
//  1. defaults (Default),
//  2. the YAML file named by --config,
//  3. LOUPE_* environment variables,
//  4. command-line flags the user actually set.
//
// Every key is declared once, as a field of a section struct whose tags
// give its YAML key, environment variable, flag name and help text; the
// loader, the flag binding and the YAML dump are all driven by that one
// declaration, so a new key cannot be half-wired.
//
// # Who owns a key
//
// This package owns the agent's own keys (interfaces, store, listen,
// logging...) and the layering. Each exporter package owns its section,
// as the control API's package owns the control section (api.Config):
// the struct with its tags (ipfix.Config, kafka.Config, otlp.Config,
// delivery.Config, promflow.Config, and tlsconf.Config inside Kafka's and
// OTLP's), its defaults, the check of each key (a CheckKey(key) method) and
// of keys together (a CheckKeys method); targets.Exporters gathers the
// export sections with the export key, whose schemes targets' one table
// checks with the parsers that open them. Config embeds those sections and
// finds their rules through the two methods, so it imports their types
// but knows none of their rules, and one rule (kafka.batch_max_bytes'
// range, a target's syntax) lives in one place, used both here and when
// the exporter starts. Rules that matter only once an exporter is used
// (Kafka's SASL keys go together, a file must be readable) are checked
// when it starts, so that every key can be set alone in any layer.
//
// The alternative was a registry: exporters register their sections by
// name at start and Config holds them in a map. It decouples further (this
// package would not import the exporters at all) but gives up typed access
// (cfg.Kafka.SASL.Username) and declaration order for the help and the
// dump, for a set of exporters that is fixed at build time anyway.
//
// Unknown YAML keys (at any depth) and unknown LOUPE_* variables are errors,
// because a misspelt key silently falling back to its default is the kind of
// mistake that is only discovered in production. Every value is checked in
// the layer it comes from, so an error names its source: the file and line,
// the environment variable, or the flag. Values are cut in messages
// (check.Quote), and the file's size is bounded.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"loupe/internal/api"
	"loupe/internal/capability/capture"
	dnsunit "loupe/internal/capability/dns"
	latencyunit "loupe/internal/capability/latency"
	rulesunit "loupe/internal/capability/rules"
	signalsunit "loupe/internal/capability/signals"
	"loupe/internal/config/check"
	"loupe/internal/export/promflow"
	"loupe/internal/export/targets"
	"loupe/internal/k8s"
	"loupe/internal/ui"
)

// None is the value of store.path, listen and pin_dir that disables the
// store, the HTTP listener and pinning.
const None = "none"

// Config is the effective configuration of the agent.
//
// Tags: yaml is the file key (",inline" merges a struct's keys into its
// parent's), env the environment variable, flag the flag name, help its
// description, arg the placeholder shown in the flag usage for flags whose
// type the flag package cannot name, and secret:"value" marks a list of
// key=value entries whose values the dump redacts. A struct field is a
// section; its env and flag tags, if any, prefix its keys'. Field types
// choose the syntax: []string is a list (comma-separated in env and
// flags), time.Duration uses Go syntax (5s, 1m30s), uint64 is a byte size
// (4096, 64KiB, 4MiB, 1GiB).
type Config struct {
	Interfaces         []string      `yaml:"interfaces" env:"LOUPE_INTERFACES" flag:"iface" arg:"glob" help:"interface name glob to capture on, e.g. eth* (empty: every interface except loopback)"`
	Exclude            []string      `yaml:"exclude" env:"LOUPE_EXCLUDE" flag:"exclude" arg:"glob" help:"interface name glob to skip even if it matches an --iface glob"`
	CacheActiveTimeout time.Duration `yaml:"cache_active_timeout" env:"LOUPE_CACHE_ACTIVE_TIMEOUT" flag:"cache-active-timeout" help:"export long-lived flows at least this often, 10ms..1h"`
	FlowBudget         int           `yaml:"flow_budget" env:"LOUPE_FLOW_BUDGET" flag:"flow-budget" help:"max distinct flows a kernel table holds per eviction interval (per CPU with per-CPU tables), 16..16777216; 0: sized from memory, or 65536 without it (per CPU on up to 2 CPUs, 131072 split among more, with per-CPU tables; given with memory, it wins and the sketch gets the rest)"`
	Memory             uint64        `yaml:"memory" env:"LOUPE_MEMORY" flag:"memory" arg:"size" help:"kernel memory budget for every map of the datapath, e.g. 16MiB: sizes the flow tables and the sketch that takes the flows they cannot hold; 0: no budget (flow_budget sizes the tables, and flows past it go through the ring buffer)"`
	RingbufSize        uint64        `yaml:"ringbuf_size" env:"LOUPE_RINGBUF_SIZE" flag:"ringbuf-size" arg:"size" help:"ring buffer size in bytes or with a KiB/MiB/GiB suffix; a power of two, 4KiB..1GiB"`
	MapType            string        `yaml:"map_type" env:"LOUPE_MAP_TYPE" flag:"map-type" help:"kernel flow map type: auto, percpu, shared, or ringbuf (off-path: every packet to userspace, for comparison)"`
	AttachMode         string        `yaml:"attach_mode" env:"LOUPE_ATTACH_MODE" flag:"attach-mode" help:"how to attach to interfaces: auto, tcx or tc"`
	AttachPosition     string        `yaml:"attach_position" env:"LOUPE_ATTACH_POSITION" flag:"attach-position" help:"where to attach among other programs: head or tail"`
	PinDir             string        `yaml:"pin_dir" env:"LOUPE_PIN_DIR" flag:"pin-dir" help:"directory on a bpf file system where programs' links and maps are pinned, so that counting goes on across restarts; none to disable"`
	Store              Store         `yaml:"store"`
	Listen             string        `yaml:"listen" env:"LOUPE_LISTEN" flag:"listen" help:"HTTP listen address host:port, or none to disable"`
	// Control is the control API's section, owned by the api package.
	Control api.Config `yaml:"control"`
	// UI is the web UI's section, owned by its package.
	UI ui.Config `yaml:"ui"`
	// Capture is the capture capability's section, owned by its package.
	Capture capture.Config `yaml:"capture"`
	// Rules is the rules capability's section, owned by its package.
	Rules rulesunit.Config `yaml:"rules"`
	// Signals is the kernel signals' section, owned by their package.
	Signals signalsunit.Config `yaml:"signals"`
	// DNS is the section of the signals at the TC hook (DNS exchanges,
	// TCP handshake RTT), owned by their unit's package.
	DNS dnsunit.Config `yaml:"dns"`
	// Latency is the per-hop latency capability's section, owned by its
	// unit's package.
	Latency latencyunit.Config `yaml:"latency"`
	// Kubernetes is the enrichment's section (pod, workload, service and
	// node names), owned by its package.
	Kubernetes k8s.Config `yaml:"kubernetes"`
	// Exporters are export, delivery, ipfix, kafka and otlp, owned by the
	// exporter packages.
	targets.Exporters `yaml:",inline"`
	Prometheus        promflow.Config `yaml:"prometheus"`
	LogLevel          string          `yaml:"log_level" env:"LOUPE_LOG_LEVEL" flag:"log-level" help:"log level: debug, info, warn or error"`
	LogFormat         string          `yaml:"log_format" env:"LOUPE_LOG_FORMAT" flag:"log-format" help:"log format: text or json"`
}

// Store configures the local flow store.
type Store struct {
	Path      string        `yaml:"path" env:"LOUPE_STORE_PATH" flag:"store" help:"flow store directory, or none to disable the store"`
	Retention time.Duration `yaml:"retention" env:"LOUPE_STORE_RETENTION" flag:"store-retention" help:"how long the store keeps flows, at least 1m"`
	MaxSize   uint64        `yaml:"max_size" env:"LOUPE_STORE_MAX_SIZE" flag:"store-max-size" arg:"size" help:"the store's largest size in bytes or with a KiB/MiB/GiB suffix; past it the oldest segments are deleted; 0 (no limit) or at least 1MiB"`
}

// Default returns the configuration used when nothing overrides a key.
func Default() Config {
	return Config{
		CacheActiveTimeout: 5 * time.Second,
		FlowBudget:         0, // 65536, or sized from memory

		RingbufSize:    1 << 20,
		MapType:        "auto",
		AttachMode:     "auto",
		AttachPosition: "head",
		PinDir:         "/sys/fs/bpf/loupe",
		Store: Store{
			Path:      "/var/lib/loupe/flows",
			Retention: 24 * time.Hour,
			MaxSize:   0, // no limit
		},
		Listen:     "127.0.0.1:9464",
		Control:    api.DefaultConfig(),
		UI:         ui.DefaultConfig(),
		Capture:    capture.DefaultConfig(),
		Rules:      rulesunit.DefaultConfig(),
		Signals:    signalsunit.DefaultConfig(),
		DNS:        dnsunit.DefaultConfig(),
		Latency:    latencyunit.DefaultConfig(),
		Kubernetes: k8s.DefaultConfig(),
		Exporters:  targets.Default(),
		Prometheus: promflow.DefaultConfig(),
		LogLevel:   "info",
		LogFormat:  "text",
	}
}

// CheckKey checks the value of one of the agent's own keys. The message
// does not name the key: callers prefix it with the key and where the
// value came from. The sections' keys are checked by their own CheckKey.
func (c Config) CheckKey(key string) error {
	switch key {
	case "interfaces":
		return checkGlobs(c.Interfaces)
	case "exclude":
		return checkGlobs(c.Exclude)
	case "cache_active_timeout":
		return check.Duration(c.CacheActiveTimeout, 10*time.Millisecond, time.Hour)
	case "flow_budget":
		if c.FlowBudget == 0 {
			return nil
		}
		return check.Int(c.FlowBudget, 16, 1<<24)
	case "memory":
		if n := c.Memory; n != 0 && (n < 1<<20 || n > 1<<40) {
			return fmt.Errorf("must be 0 (no budget) or between 1MiB and 1TiB, got %s", check.FormatSize(n))
		}
	case "ringbuf_size":
		return checkRingbufSize(c.RingbufSize)
	case "map_type":
		return check.OneOf(c.MapType, "auto", "percpu", "shared", "ringbuf")
	case "attach_mode":
		return check.OneOf(c.AttachMode, "auto", "tcx", "tc")
	case "attach_position":
		return check.OneOf(c.AttachPosition, "head", "tail")
	case "pin_dir":
		if c.PinDir == "" {
			return fmt.Errorf("must not be empty (use %q to disable pinning)", None)
		}
		return check.Path(c.PinDir)
	case "store.path":
		if c.Store.Path == "" {
			return fmt.Errorf("must not be empty (use %q to disable the store)", None)
		}
		return check.Path(c.Store.Path)
	case "store.retention":
		return check.Duration(c.Store.Retention, time.Minute, 0)
	case "store.max_size":
		if n := c.Store.MaxSize; n != 0 && (n < 1<<20 || n > 1<<62) {
			return fmt.Errorf("must be 0 (no limit) or between 1MiB and %s, got %s", check.FormatSize(1<<62), check.FormatSize(n))
		}
	case "listen":
		return checkListen(c.Listen)
	case "log_level":
		return check.OneOf(c.LogLevel, "debug", "info", "warn", "error")
	case "log_format":
		return check.OneOf(c.LogFormat, "text", "json")
	}
	return nil
}

// maxGlob bounds an interface name glob: names are at most 15 bytes, and
// even a glob of character classes needs far less than this.
const maxGlob = 256

// checkGlobs checks interface name globs. path.Match reports a malformed
// pattern whatever the name, so matching against "" validates the syntax.
func checkGlobs(globs []string) error {
	for _, g := range globs {
		if g == "" {
			return errors.New("empty interface pattern")
		}
		if len(g) > maxGlob {
			return fmt.Errorf("interface pattern %s is longer than %d bytes", check.Quote(g), maxGlob)
		}
		if strings.ContainsAny(g, "/ \t") {
			// Interface names never contain these; such a pattern can
			// match nothing and is certainly a mistake.
			return fmt.Errorf("invalid interface pattern %s: interface names contain no '/' or spaces", check.Quote(g))
		}
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("invalid interface pattern %s: %v", check.Quote(g), err)
		}
	}
	return nil
}

// checkRingbufSize enforces what the kernel requires of a BPF ring buffer:
// a power-of-two multiple of the page size. 4096 is the smallest page size
// Linux uses; 1GiB is a sanity bound on locked kernel memory.
func checkRingbufSize(n uint64) error {
	if err := check.Size(n, 4096, 1<<30); err != nil {
		return err
	}
	if n&(n-1) != 0 {
		return fmt.Errorf("must be a power of two, got %d", n)
	}
	return nil
}

func checkListen(addr string) error {
	if addr == None {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid address %s: want host:port, or %q to disable the listener", check.Quote(addr), None)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("invalid port %s in %s: want a number 0-65535", check.Quote(port), check.Quote(addr))
	}
	return nil
}

// String returns c as a YAML document that Load accepts back unchanged,
// but for secrets: the values of secret keys (otlp.headers) are replaced
// by Redacted. `loupe run --print-config` prints it.
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
			valueNode(f.kind, redact(f, f.get(c))))
	}
	return root
}

// Redacted replaces a secret value in the dump.
const Redacted = "<redacted>"

// redact hides the values of a secret key: of a key=value list, the part
// after each '=', so that the dump still says which headers are set.
func redact(f field, v any) any {
	if f.secret == "" {
		return v
	}
	switch v := v.(type) {
	case []string:
		out := make([]string, len(v))
		for i, e := range v {
			k, _, _ := strings.Cut(e, "=")
			out[i] = k + "=" + Redacted
		}
		return out
	case string:
		if v != "" {
			return Redacted
		}
	}
	return v
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
