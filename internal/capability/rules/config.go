package rules

import (
	"time"

	"loupe/internal/config/check"
)

// Config is the rules section of the agent's configuration, owned by this
// package (the config package embeds it, as the capture's).
//
// Rules are off unless a file is given or enabled is set: off, the entry
// programs run the flows-only build, which judges no packet.
type Config struct {
	File      string        `yaml:"file" env:"LOUPE_RULES_FILE" flag:"rules" arg:"file" help:"measurement rules file, one rule a line (README, \"Rules\"): which traffic is measured, skipped, sampled or aggregated; reloaded when it changes; turns rules on"`
	Enabled   bool          `yaml:"enabled" env:"LOUPE_RULES_ENABLED" flag:"rules-enabled" help:"turn rules on without a file, for rules given through 'loupe rules' alone"`
	Reload    time.Duration `yaml:"reload_interval" env:"LOUPE_RULES_RELOAD_INTERVAL" flag:"rules-reload-interval" help:"how often the rules file is checked for changes"`
	MaxSeries int           `yaml:"max_series" env:"LOUPE_RULES_MAX_SERIES" flag:"rules-max-series" help:"rules with their own loupe_rule_* series, 1..100000; the others count under rule=\"other\""`
}

// DefaultConfig is the section's defaults: rules off.
func DefaultConfig() Config {
	return Config{Reload: 2 * time.Second, MaxSeries: 1000}
}

// On reports whether the configuration asks for rules.
func (c Config) On() bool { return c.File != "" || c.Enabled }

// CheckKey checks one key of the section; the message does not name it.
func (c Config) CheckKey(key string) error {
	switch key {
	case "file":
		// Read and parsed when the unit opens, where a bad line stops
		// the start with its number.
		if c.File == "" {
			return nil
		}
		return check.Path(c.File)
	case "reload_interval":
		return check.Duration(c.Reload, 100*time.Millisecond, time.Hour)
	case "max_series":
		return check.Int(c.MaxSeries, 1, 100000)
	}
	return nil
}
