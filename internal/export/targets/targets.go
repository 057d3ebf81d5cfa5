// Package targets is the one table of export schemes (--export URL): the
// place that knows every exporter package, so that the configuration
// checks a target with the same parser that later opens it, and the agent
// and the benchmarks open exporters exactly alike.
//
// It also assembles the exporters' configuration sections (Exporters),
// each owned by its package: the section type with its keys' tags,
// defaults, per-key checks (CheckKey) and cross-key checks (CheckKeys). The
// config package embeds Exporters and applies its layers (file,
// environment, flags) to the keys it finds there by their tags, knowing
// none of their rules.
package targets

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"loupe/internal/config/check"
	"loupe/internal/export"
	"loupe/internal/export/delivery"
	"loupe/internal/export/ipfix"
	"loupe/internal/export/jsonl"
	"loupe/internal/export/kafka"
	"loupe/internal/export/otlp"
)

// Exporters are the configuration of every export target: the targets
// themselves and the sections of their exporters, in the order
// `loupe run --help` and --print-config list them.
type Exporters struct {
	Export   []string        `yaml:"export" env:"LOUPE_EXPORT" flag:"export" arg:"target" help:"target to export flows to: ipfix+udp://HOST:PORT, ipfix+tcp://HOST:PORT, kafka://BROKER[,BROKER]/TOPIC[?format=protobuf|json], otlp://HOST:PORT, json:PATH or json:- (stdout)"`
	Delivery delivery.Config `yaml:"delivery"`
	IPFIX    ipfix.Config    `yaml:"ipfix"`
	Kafka    kafka.Config    `yaml:"kafka"`
	OTLP     otlp.Config     `yaml:"otlp"`
}

// Default returns the defaults of every section, and no target.
func Default() Exporters {
	return Exporters{
		Delivery: delivery.DefaultConfig(),
		IPFIX:    ipfix.DefaultConfig(),
		Kafka:    kafka.DefaultConfig(),
		OTLP:     otlp.DefaultConfig(),
	}
}

// CheckKey checks the export key: see CheckList.
func (e Exporters) CheckKey(key string) error {
	if key == "export" {
		return CheckList(e.Export)
	}
	return nil
}

// scheme is one row of the table.
type scheme struct {
	name   string
	syntax string                    // shown in errors
	check  func(target string) error // the reason alone
	// client opens a network exporter; nil for a sink that writes
	// synchronously (json), which open makes.
	client func(target string, e *Exporters, log *slog.Logger) (delivery.Client, error)
	open   func(target string, log *slog.Logger) (export.Sink, error)
}

// schemes is the table of export schemes. To add an exporter, add a row
// (and its section to Exporters). It is a function so that the table is
// not mutable package state.
func schemes() []scheme {
	ipfixClient := func(target string, e *Exporters, log *slog.Logger) (delivery.Client, error) {
		return ipfix.New(target, e.IPFIX.Options(log))
	}
	return []scheme{
		{name: jsonl.Scheme, syntax: jsonl.Syntax, check: jsonl.CheckTarget, open: openJSON},
		{name: ipfix.SchemeUDP, syntax: ipfix.SyntaxUDP, check: ipfix.CheckTarget, client: ipfixClient},
		{name: ipfix.SchemeTCP, syntax: ipfix.SyntaxTCP, check: ipfix.CheckTarget, client: ipfixClient},
		{name: kafka.Scheme, syntax: kafka.Syntax, check: kafka.CheckTarget,
			client: func(target string, e *Exporters, log *slog.Logger) (delivery.Client, error) {
				opts, err := e.Kafka.Options(log)
				if err != nil {
					return nil, err
				}
				return kafka.New(target, opts)
			}},
		{name: otlp.Scheme, syntax: otlp.Syntax, check: otlp.CheckTarget,
			client: func(target string, e *Exporters, log *slog.Logger) (delivery.Client, error) {
				opts, err := e.OTLP.Options(log)
				if err != nil {
					return nil, err
				}
				return otlp.New(target, opts)
			}},
	}
}

func openJSON(target string, log *slog.Logger) (export.Sink, error) {
	path, err := jsonl.ParseTarget(target)
	if err != nil {
		return nil, err
	}
	return jsonl.Open(path, log)
}

// lookup returns the row of target's scheme.
func lookup(target string) (scheme, bool) {
	name, _, _ := strings.Cut(target, ":")
	all := schemes()
	i := slices.IndexFunc(all, func(s scheme) bool { return s.name == name })
	if i < 0 {
		return scheme{}, false
	}
	return all[i], true
}

// Names returns the known schemes, in table order.
func Names() []string {
	var out []string
	for _, s := range schemes() {
		out = append(out, s.name)
	}
	return out
}

// Check checks one target against its scheme's syntax.
func Check(target string) error {
	s, ok := lookup(target)
	if !ok {
		var known []string
		for _, s := range schemes() {
			known = append(known, s.syntax)
		}
		return fmt.Errorf("unknown sink %s (known: %s)", check.Quote(target), strings.Join(known, "; "))
	}
	if err := s.check(target); err != nil {
		return fmt.Errorf("invalid target %s: %v (want %s)", check.Quote(target), err, s.syntax)
	}
	return nil
}

// CheckList checks each target and rejects duplicates, which would write
// every flow twice to the same place.
func CheckList(targets []string) error {
	for i, t := range targets {
		if slices.Contains(targets[:i], t) {
			return fmt.Errorf("duplicate target %s", check.Quote(t))
		}
		if err := Check(t); err != nil {
			return err
		}
	}
	return nil
}

// Open opens the sink of target with the settings of e. Network exporters
// (IPFIX, Kafka, OTLP) come wrapped in their delivery queue, which is also
// returned so that its counters can be exported; q is nil for the JSON
// sink, which writes synchronously to a local file.
func Open(target string, e Exporters, log *slog.Logger) (s export.Sink, q *delivery.Queue, err error) {
	sc, ok := lookup(target)
	if !ok {
		return nil, nil, fmt.Errorf("export %s: unsupported sink", check.Quote(target))
	}
	if sc.client == nil {
		s, err := sc.open(target, log)
		if err != nil {
			return nil, nil, fmt.Errorf("export %s: %w", check.Cut(target), err)
		}
		return s, nil, nil
	}
	c, err := sc.client(target, &e, log)
	if err != nil {
		return nil, nil, fmt.Errorf("export %s: %w", check.Cut(target), err)
	}
	q = delivery.New(target, c, e.Delivery.Options(log))
	return q, q, nil
}
