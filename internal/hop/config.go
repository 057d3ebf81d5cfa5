package hop

import (
	"time"

	"loupe/internal/config/check"
)

// Config is the matching half of the latency section (latency.*): the
// latency unit's Config embeds it inline, beside the kernel half's keys.
type Config struct {
	TableSize   int           `yaml:"table_size" env:"LOUPE_LATENCY_TABLE_SIZE" flag:"latency-table-size" help:"segments (and trace contexts) being matched across hooks at once, 64..4194304; past it the oldest is finished early and counted"`
	MatchWindow time.Duration `yaml:"match_window" env:"LOUPE_LATENCY_MATCH_WINDOW" flag:"latency-match-window" help:"how long a segment waits for its stamps from more hooks before its hops are reported, 1ms..10s"`
	ClockSync   bool          `yaml:"clock_sync" env:"LOUPE_LATENCY_CLOCK_SYNC" flag:"latency-clock-sync" help:"this node's clock is in sync with the other nodes' (PTP, or NTP within the latency measured): loupe latency reports the hop between two nodes one way"`
	MaxPairs    int           `yaml:"max_pairs" env:"LOUPE_LATENCY_MAX_PAIRS" flag:"latency-max-pairs" help:"interface pairs loupe_hop_latency_seconds keeps, 1..65536; hops of more pairs are counted, not observed"`
	NodeName    string        `yaml:"node_name" env:"LOUPE_LATENCY_NODE_NAME" flag:"latency-node-name" help:"the node's name in latency records and spans (default the host name)"`
}

// DefaultConfig is the section's defaults.
func DefaultConfig() Config {
	return Config{TableSize: DefaultTableSize, MatchWindow: DefaultWindow, MaxPairs: DefaultMaxPairs}
}

// CheckKey checks one key of the section; the message does not name it.
func (c Config) CheckKey(key string) error {
	switch key {
	case "table_size":
		return check.Int(c.TableSize, 64, 1<<22)
	case "match_window":
		return check.Duration(c.MatchWindow, time.Millisecond, 10*time.Second)
	case "max_pairs":
		return check.Int(c.MaxPairs, 1, 1<<16)
	}
	return nil
}
