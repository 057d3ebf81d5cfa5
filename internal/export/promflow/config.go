package promflow

import (
	"errors"
	"log/slog"
	"slices"
	"strings"

	"loupe/internal/config/check"
)

// Config is the prometheus section of the agent's configuration: the flow
// metrics on the HTTP listener. The tags are read by the config package:
// yaml is the key, env and flag its environment variable and flag, help
// the flag's description.
type Config struct {
	MaxSeries  int      `yaml:"max_series" env:"LOUPE_PROMETHEUS_MAX_SERIES" flag:"prometheus-max-series" help:"hard cap on flow metric label sets; past it new ones fold into an \"other\" series, 1..1000000"`
	Keys       []string `yaml:"keys" env:"LOUPE_PROMETHEUS_KEYS" flag:"prometheus-key" arg:"key" help:"extra aggregation key (label) of the flow metrics: src_port, dst_port, src_group, dst_group, eth_type, dscp, vlan_id"`
	CIDRGroups []string `yaml:"cidr_groups" env:"LOUPE_PROMETHEUS_CIDR_GROUPS" flag:"prometheus-cidr-group" arg:"name=cidr" help:"named address group for src_group and dst_group, as name=cidr; repeat a name to add prefixes; the longest prefix wins"`
}

// maxMaxSeries bounds max_series: each series costs memory in the agent
// and in every Prometheus that scrapes it.
const maxMaxSeries = 1_000_000

// DefaultConfig returns the section's defaults, those of Options.
func DefaultConfig() Config {
	return Config{MaxSeries: DefaultMaxSeries}
}

// CheckKey checks the value of one key of the section (relative to it).
// The message does not name the key: the config package prefixes it with
// the key and the layer it came from.
func (c Config) CheckKey(key string) error {
	switch key {
	case "max_series":
		return check.Int(c.MaxSeries, 1, maxMaxSeries)
	case "keys":
		_, err := ParseKeys(c.Keys)
		return unprefixed(err, "keys: ")
	case "cidr_groups":
		_, err := ParseGroups(c.CIDRGroups)
		return unprefixed(err, "cidr_groups: ")
	}
	return nil
}

// unprefixed drops the key with which the parsers' errors start, since
// CheckKey's caller names it.
func unprefixed(err error, prefix string) error {
	if err == nil {
		return nil
	}
	return errors.New(strings.TrimPrefix(err.Error(), prefix))
}

// CheckKeys checks what no single key can (group keys need groups). The
// message names the key relative to the section.
func (c Config) CheckKeys() error {
	_, err := c.Options(nil)
	return err
}

// Options returns the sink options of the section. Groups that no key
// uses are allowed (a configuration may define them before using them);
// log, if not nil, hears about them.
func (c Config) Options(log *slog.Logger) (Options, error) {
	keys, err := ParseKeys(c.Keys)
	if err != nil {
		return Options{}, err
	}
	groups, err := ParseGroups(c.CIDRGroups)
	if err != nil {
		return Options{}, err
	}
	opts := Options{MaxSeries: c.MaxSeries, Keys: keys, Groups: groups, Logger: log}
	if err := opts.Validate(); err != nil {
		return Options{}, err
	}
	if log != nil && len(groups) > 0 && !slices.Contains(c.Keys, KeySrcGroup.String()) && !slices.Contains(c.Keys, KeyDstGroup.String()) {
		log.Warn("prometheus.cidr_groups are set but unused: add src_group or dst_group to prometheus.keys")
	}
	return opts, nil
}
