package signals

import (
	"loupe/internal/config/check"
	"loupe/internal/datapath"
)

// Config is the signals section of the agent's configuration, owned by this
// package (the config package embeds it, as the capture's and the rules').
// Every signal is on by default: each costs nothing per packet at the TC
// hooks, only per event at its tracepoint.
type Config struct {
	RTT         bool `yaml:"rtt" env:"LOUPE_SIGNALS_RTT" flag:"signals-rtt" help:"smoothed RTT of TCP connections (min, max and last per interval), from the tcp_probe tracepoint"`
	Retransmits bool `yaml:"retransmits" env:"LOUPE_SIGNALS_RETRANSMITS" flag:"signals-retransmits" help:"TCP segments retransmitted per connection, from the tcp_retransmit_skb tracepoint"`
	Drops       bool `yaml:"drops" env:"LOUPE_SIGNALS_DROPS" flag:"signals-drops" help:"packets the kernel dropped, per 5-tuple and drop reason, from the kfree_skb tracepoint"`
	TableSize   int  `yaml:"table_size" env:"LOUPE_SIGNALS_TABLE_SIZE" flag:"signals-table-size" help:"5-tuples each signal table holds per interval (connections with RTT or retransmits; 5-tuples and reasons of drops), 16..1048576; past it events are counted as lost"`
}

// DefaultConfig is the section's defaults: every signal on.
func DefaultConfig() Config {
	return Config{RTT: true, Retransmits: true, Drops: true, TableSize: 16384}
}

// On is the signals the configuration turns on.
func (c Config) On() map[datapath.Signal]bool {
	return map[datapath.Signal]bool{
		datapath.SignalRTT:         c.RTT,
		datapath.SignalRetransmits: c.Retransmits,
		datapath.SignalDrops:       c.Drops,
	}
}

// Any reports whether any signal is on.
func (c Config) Any() bool { return c.RTT || c.Retransmits || c.Drops }

// CheckKey checks one key of the section; the message does not name it.
func (c Config) CheckKey(key string) error {
	if key == "table_size" {
		return check.Int(c.TableSize, 16, 1<<20)
	}
	return nil
}
