package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"loupe/internal/export/promflow"
)

// Validate checks every key of c and reports all invalid ones, each as
// "config: KEY: problem". Load already checks each value where it is read;
// Validate is for configurations built in code, and a last guard in Load.
func (c *Config) Validate() error {
	var errs []error
	for _, f := range fields() {
		if err := checkValue(f.key, f.get(c)); err != nil {
			errs = append(errs, fmt.Errorf("config: %s: %w", f.key, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, c.checkPrometheus())
	}
	return errors.Join(errs...)
}

// checkPrometheus checks what no single key can: group keys need groups,
// and groups need a group key.
func (c *Config) checkPrometheus() error {
	keys, _ := promflow.ParseKeys(c.Prometheus.Keys)
	groups, _ := promflow.ParseGroups(c.Prometheus.CIDRGroups)
	opts := promflow.Options{MaxSeries: c.Prometheus.MaxSeries, Keys: keys, Groups: groups}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("config: prometheus.%w", err)
	}
	return nil
}

// checkValue checks the value v of key. The message does not name the key:
// callers prefix it with the key and where the value came from.
func checkValue(key string, v any) error {
	switch key {
	case "interfaces", "exclude":
		return checkGlobs(v.([]string))
	case "cache_active_timeout":
		return checkDuration(v.(time.Duration), 10*time.Millisecond, time.Hour)
	case "flow_budget":
		if n := v.(int); n < 16 || n > 1<<24 {
			return fmt.Errorf("must be between 16 and %d, got %d", 1<<24, n)
		}
	case "ringbuf_size":
		return checkRingbufSize(v.(uint64))
	case "map_type":
		return checkOneOf(v.(string), "auto", "percpu", "shared")
	case "attach_mode":
		return checkOneOf(v.(string), "auto", "tcx", "tc")
	case "attach_position":
		return checkOneOf(v.(string), "head", "tail")
	case "store.path":
		if v.(string) == "" {
			return fmt.Errorf("must not be empty (use %q to disable the store)", None)
		}
	case "store.retention":
		return checkDuration(v.(time.Duration), time.Minute, 0)
	case "store.max_size":
		if n := v.(uint64); n != 0 && (n < 1<<20 || n > 1<<62) {
			return fmt.Errorf("must be 0 (no limit) or between 1MiB and %s, got %s", formatSize(1<<62), formatSize(n))
		}
	case "listen":
		return checkListen(v.(string))
	case "export":
		return checkExports(v.([]string))
	case "delivery.queue_size", "delivery.batch_size":
		return checkInt(v.(int), 1, 1<<24)
	case "delivery.max_linger":
		return checkDuration(v.(time.Duration), time.Millisecond, time.Minute)
	case "delivery.retry_max":
		return checkDuration(v.(time.Duration), 100*time.Millisecond, 10*time.Minute)
	case "delivery.shutdown_timeout":
		return checkDuration(v.(time.Duration), 0, 10*time.Minute)
	case "ipfix.mtu":
		if v.(int) != 0 {
			return checkInt(v.(int), 512, 65535)
		}
	case "ipfix.template_refresh":
		return checkDuration(v.(time.Duration), time.Second, 24*time.Hour)
	case "ipfix.observation_domain":
		return checkInt(v.(int), 1, 1<<32-1)
	case "ipfix.enterprise_number":
		return checkInt(v.(int), 1, 1<<32-1)
	case "kafka.compression":
		return checkOneOf(v.(string), "none", "gzip", "snappy", "lz4", "zstd")
	case "kafka.batch_max_bytes":
		if n := v.(uint64); n < 1<<10 || n > 64<<20 {
			return fmt.Errorf("must be between 1KiB and 64MiB, got %s", formatSize(n))
		}
	case "kafka.linger":
		return checkDuration(v.(time.Duration), 0, 10*time.Second)
	case "kafka.client_id":
		if v.(string) == "" {
			return errors.New("must not be empty")
		}
	case "kafka.sasl.mechanism":
		return checkOneOf(v.(string), "none", "plain", "scram-sha-256", "scram-sha-512")
	case "otlp.compression":
		return checkOneOf(v.(string), "none", "gzip")
	case "otlp.headers":
		return checkHeaders(v.([]string))
	case "prometheus.max_series":
		return checkInt(v.(int), 1, 1_000_000)
	case "prometheus.keys":
		_, err := promflow.ParseKeys(v.([]string))
		return unprefixed(err, "keys: ")
	case "prometheus.cidr_groups":
		_, err := promflow.ParseGroups(v.([]string))
		return unprefixed(err, "cidr_groups: ")
	case "log_level":
		return checkOneOf(v.(string), "debug", "info", "warn", "error")
	case "log_format":
		return checkOneOf(v.(string), "text", "json")
	}
	return nil
}

// unprefixed drops the prefix with which another package's error names the
// key, since our callers name it themselves.
func unprefixed(err error, prefix string) error {
	if err == nil {
		return nil
	}
	return errors.New(strings.TrimPrefix(err.Error(), prefix))
}

func checkInt(n, min, max int) error {
	if n < min || n > max {
		return fmt.Errorf("must be between %d and %d, got %d", min, max, n)
	}
	return nil
}

// checkHeaders checks gRPC metadata entries key=value. gRPC keys are
// lowercase ASCII letters, digits and - _ .
func checkHeaders(headers []string) error {
	for _, h := range headers {
		k, _, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return fmt.Errorf("invalid header %q: want key=value", h)
		}
		for _, c := range k {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				return fmt.Errorf("invalid header key %q: gRPC keys are lowercase letters, digits, '-', '_' and '.'", k)
			}
		}
	}
	return nil
}

func checkOneOf(v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("must be one of %s, got %q", strings.Join(allowed, ", "), v)
}

// checkDuration checks min <= d and, if max is not zero, d <= max.
func checkDuration(d, min, max time.Duration) error {
	switch {
	case max != 0 && (d < min || d > max):
		return fmt.Errorf("must be between %s and %s, got %s", formatDuration(min), formatDuration(max), formatDuration(d))
	case d < min:
		return fmt.Errorf("must be at least %s, got %s", formatDuration(min), formatDuration(d))
	}
	return nil
}

// checkGlobs checks interface name globs. path.Match reports a malformed
// pattern whatever the name, so matching against "" validates the syntax.
func checkGlobs(globs []string) error {
	for _, g := range globs {
		if g == "" {
			return errors.New("empty interface pattern")
		}
		if strings.ContainsAny(g, "/ \t") {
			// Interface names never contain these; such a pattern can
			// match nothing and is certainly a mistake.
			return fmt.Errorf("invalid interface pattern %q: interface names contain no '/' or spaces", g)
		}
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("invalid interface pattern %q: %v", g, err)
		}
	}
	return nil
}

// checkRingbufSize enforces what the kernel requires of a BPF ring buffer:
// a power-of-two multiple of the page size. 4096 is the smallest page size
// Linux uses; 1GiB is a sanity bound on locked kernel memory.
func checkRingbufSize(n uint64) error {
	switch {
	case n < 4096 || n > 1<<30:
		return fmt.Errorf("must be between 4KiB and 1GiB, got %s", formatSize(n))
	case n&(n-1) != 0:
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
		return fmt.Errorf("invalid address %q: want host:port, or %q to disable the listener", addr, None)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("invalid port %q in %q: want a number 0-65535", port, addr)
	}
	return nil
}

// exportScheme is one kind of export sink this package can check.
type exportScheme struct {
	name   string
	syntax string                  // shown in errors
	check  func(rest string) error // rest is what follows "name:"
}

// exportSchemes is the table of known sinks. To add one (ipfix+udp, kafka,
// otlp...), add a row; the export package does the real work. It is a
// function so that the table is not mutable package state.
func exportSchemes() []exportScheme {
	return []exportScheme{
		{"json", "json:PATH or json:- (stdout)", checkJSONTarget},
		{"ipfix+udp", "ipfix+udp://HOST:PORT", checkHostPortTarget},
		{"ipfix+tcp", "ipfix+tcp://HOST:PORT", checkHostPortTarget},
		{"kafka", "kafka://BROKER[,BROKER]/TOPIC[?format=protobuf|json]", checkKafkaTarget},
		{"otlp", "otlp://HOST:PORT", checkHostPortTarget},
	}
}

// checkHostPortTarget checks "//HOST:PORT" with nothing after it. The
// exporter parses the target again when it starts; this check is here so
// that a typo fails at load time with the key's name.
func checkHostPortTarget(rest string) error {
	hostport, ok := strings.CutPrefix(rest, "//")
	if !ok {
		return errors.New("missing //")
	}
	return checkHostPort(hostport)
}

func checkHostPort(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("invalid address %q", hostport)
	}
	if host == "" {
		return errors.New("missing host")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("invalid port %q", port)
	}
	return nil
}

// checkKafkaTarget checks "//BROKER[,BROKER]/TOPIC[?format=...]". It is
// split by hand: url.Parse cannot read a broker list that holds bracketed
// IPv6 addresses.
func checkKafkaTarget(rest string) error {
	rest, ok := strings.CutPrefix(rest, "//")
	if !ok {
		return errors.New("missing //")
	}
	rest, query, _ := strings.Cut(rest, "?")
	brokers, topic, _ := strings.Cut(rest, "/")
	if strings.Contains(brokers, "@") {
		return errors.New("credentials do not belong in the URL: use kafka.sasl")
	}
	for _, b := range strings.Split(brokers, ",") {
		if err := checkHostPort(b); err != nil {
			return fmt.Errorf("broker: %v", err)
		}
	}
	if topic == "" || strings.Contains(topic, "/") {
		return fmt.Errorf("invalid topic %q", topic)
	}
	values, err := url.ParseQuery(query)
	if err != nil {
		return fmt.Errorf("invalid options %q", query)
	}
	for k, v := range values {
		if k != "format" {
			return fmt.Errorf("unknown option %q", k)
		}
		if err := checkOneOf(v[len(v)-1], "protobuf", "json"); err != nil {
			return fmt.Errorf("format %v", err)
		}
	}
	return nil
}

func checkJSONTarget(rest string) error {
	if rest == "" {
		return errors.New("missing path")
	}
	if strings.ContainsRune(rest, 0) {
		return errors.New("path contains a NUL byte")
	}
	return nil
}

// checkExports checks each target against its scheme and rejects
// duplicates, which would write every flow twice to the same place.
func checkExports(targets []string) error {
	schemes := exportSchemes()
	for i, t := range targets {
		if slices.Contains(targets[:i], t) {
			return fmt.Errorf("duplicate target %q", t)
		}
		name, rest, _ := strings.Cut(t, ":")
		j := slices.IndexFunc(schemes, func(s exportScheme) bool { return s.name == name })
		if j < 0 {
			var known []string
			for _, s := range schemes {
				known = append(known, s.syntax)
			}
			return fmt.Errorf("unknown sink %q (known: %s)", t, strings.Join(known, "; "))
		}
		if err := schemes[j].check(rest); err != nil {
			return fmt.Errorf("invalid target %q: %v (want %s)", t, err, schemes[j].syntax)
		}
	}
	return nil
}
