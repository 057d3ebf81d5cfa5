package latency

import (
	"fmt"

	"loupe/internal/config/check"
	"loupe/internal/datapath"
	"loupe/internal/hop"
)

// Config is the latency section of the agent's configuration, owned by
// this package (the config package embeds it, as the DNS unit's).
//
// Off by default: switched on, every TCP segment with payload pays the
// kernel's look at its first bytes and its connection's slot, and every
// request a scan of its header block.
type Config struct {
	Enabled          bool   `yaml:"enabled" env:"LOUPE_LATENCY_ENABLED" flag:"latency" help:"per-hop latency: stamp HTTP request segments (and sampled TCP segments) at every hook, and find their trace context (traceparent, b3, TCP option 25, IP option 136) in the kernel"`
	Sampling         int    `yaml:"sampling" env:"LOUPE_LATENCY_SAMPLING" flag:"latency-sampling" help:"also stamp 1 in N TCP segments with payload, decided alike at every hook, 0..1048576; 0: requests only"`
	UntracedSampling int    `yaml:"untraced_sampling" env:"LOUPE_LATENCY_UNTRACED_SAMPLING" flag:"latency-untraced-sampling" help:"stamp 1 in N HTTP requests without a trace context or with one that says its trace is not sampled, decided alike at every hook, 0..1048576; 1: all, 0: none (a request of a sampled trace is always stamped)"`
	HeaderScanLimit  uint64 `yaml:"header_scan_limit" env:"LOUPE_LATENCY_HEADER_SCAN_LIMIT" flag:"latency-header-scan-limit" arg:"size" help:"the size, in bytes, of a request's header block scanned for its trace context, across segments, 8KiB..1MiB"`
	ScanTableSize    int    `yaml:"scan_table_size" env:"LOUPE_LATENCY_SCAN_TABLE_SIZE" flag:"latency-scan-table-size" help:"requests whose header block is scanned at once per hook (an LRU: past it the oldest scan is forgotten and counted), 16..1048576"`
	RingSize         uint64 `yaml:"ring_size" env:"LOUPE_LATENCY_RING_SIZE" flag:"latency-ring-size" arg:"size" help:"the size of the kernel's ring buffer of stamps and trace contexts, a power of two, 64KiB..1GiB; past it records are counted and lost"`
	// Matching is the userspace half's: how stamps of one segment are
	// matched across hooks, and where the hops go.
	Matching hop.Config `yaml:",inline"`
}

// DefaultConfig is the section's defaults: off.
func DefaultConfig() Config {
	d := datapath.DefaultLatencySizes()
	return Config{Sampling: d.Sampling, UntracedSampling: d.UntracedSampling, HeaderScanLimit: uint64(d.ScanLimit), ScanTableSize: d.Scans, RingSize: uint64(d.RingSize),
		Matching: hop.DefaultConfig()}
}

// Sizes configure the datapath.
func (c Config) Sizes() datapath.LatencySizes {
	return datapath.LatencySizes{Sampling: c.Sampling, UntracedSampling: c.UntracedSampling, ScanLimit: int(c.HeaderScanLimit), Scans: c.ScanTableSize,
		RingSize: int(c.RingSize)}
}

// CheckKey checks one key of the section; the message does not name it.
func (c Config) CheckKey(key string) error {
	switch key {
	case "sampling":
		return check.Int(c.Sampling, 0, 1<<20)
	case "untraced_sampling":
		return check.Int(c.UntracedSampling, 0, 1<<20)
	case "header_scan_limit":
		return check.Size(c.HeaderScanLimit, 8<<10, datapath.MaxLatencyScanLimit)
	case "scan_table_size":
		return check.Int(c.ScanTableSize, 16, 1<<20)
	case "ring_size":
		if err := check.Size(c.RingSize, 64<<10, 1<<30); err != nil {
			return err
		}
		if c.RingSize&(c.RingSize-1) != 0 {
			return fmt.Errorf("must be a power of two, got %s", check.FormatSize(c.RingSize))
		}
	default:
		return c.Matching.CheckKey(key)
	}
	return nil
}
