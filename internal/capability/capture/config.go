package capture

import (
	"errors"
	"fmt"
	"time"

	"loupe/internal/config/check"
	"loupe/internal/datapath"
)

// Config is the capture section of the agent's configuration, owned by this
// package; the config package embeds it and finds its rules through
// CheckKey and CheckKeys. The tags are read by the config package: yaml is
// the key, env and flag its environment variable and flag.
//
// Capture is off unless one of dir, mirror, follow or triggers is set: it
// exposes packet payloads, so nothing is captured unless asked for.
type Config struct {
	Dir      string   `yaml:"dir" env:"LOUPE_CAPTURE_DIR" flag:"capture-dir" arg:"dir" help:"write the triggered connections as pcapng files in this directory (created 0700, files 0600); turns capture on"`
	Triggers []string `yaml:"triggers" env:"LOUPE_CAPTURE_TRIGGERS" flag:"trigger" arg:"rule" help:"a rule that makes a connection captured, e.g. 'http.status=500-599' (the default), 'tcp.rst', 'http.status=503 sample=1/10 packets=100' (docs/capture.md); turns capture on"`
	Mirror   string   `yaml:"mirror" env:"LOUPE_CAPTURE_MIRROR" flag:"mirror" arg:"iface" help:"clone every packet of a triggered connection, from the trigger on, to the interface iface (tcpdump -i iface sees them); turns capture on"`
	Follow   bool     `yaml:"follow" env:"LOUPE_CAPTURE_FOLLOW" flag:"capture-follow" help:"turn capture on for 'loupe capture --follow' alone, without files or a mirror"`

	Snaplen           int           `yaml:"snaplen" env:"LOUPE_CAPTURE_SNAPLEN" flag:"capture-snaplen" help:"bytes captured of each packet, 0 for all (up to 65000: a GSO super-packet is cut there)"`
	MaxTriggersPerSec int           `yaml:"max_triggers_per_second" env:"LOUPE_CAPTURE_MAX_TRIGGERS_PER_SECOND" flag:"capture-max-triggers" help:"traces started per second at most, over every trigger; 0: no limit"`
	Connections       int           `yaml:"connections" env:"LOUPE_CAPTURE_CONNECTIONS" flag:"capture-connections" help:"connections followed at once (an LRU table), 64..4194304"`
	KeepPackets       int           `yaml:"keep_packets" env:"LOUPE_CAPTURE_KEEP_PACKETS" flag:"capture-keep-packets" help:"packets with payload kept per connection before its trigger (the failing request), 0..8"`
	KeepBytes         int           `yaml:"keep_bytes" env:"LOUPE_CAPTURE_KEEP_BYTES" flag:"capture-keep-bytes" help:"bytes kept of each such packet, 64..2048"`
	KeepSlots         int           `yaml:"keep_slots_per_cpu" env:"LOUPE_CAPTURE_KEEP_SLOTS_PER_CPU" flag:"capture-keep-slots" help:"packets each CPU's part of the keep ring holds (2 KiB each), rounded up to a power of two, 16..65536"`
	IdleTimeout       time.Duration `yaml:"idle_timeout" env:"LOUPE_CAPTURE_IDLE_TIMEOUT" flag:"capture-idle-timeout" help:"a connection idle this long is followed afresh"`
	MaxAge            time.Duration `yaml:"max_connection_age" env:"LOUPE_CAPTURE_MAX_CONNECTION_AGE" flag:"capture-max-connection-age" help:"a connection followed this long is followed afresh"`
	HTTPMaxSeries     int           `yaml:"http_max_series" env:"LOUPE_CAPTURE_HTTP_MAX_SERIES" flag:"capture-http-max-series" help:"HTTP metrics: entries (server and request or status class) kept, six a server, 16..1048576; past it, new servers count under server=\"other\""`
	BufferSize        uint64        `yaml:"buffer_size" env:"LOUPE_CAPTURE_BUFFER_SIZE" flag:"capture-buffer-size" arg:"size" help:"kernel buffer size of captured packets per CPU; a reader too slow for it loses packets, counted"`

	FileMaxSize uint64        `yaml:"file_max_size" env:"LOUPE_CAPTURE_FILE_MAX_SIZE" flag:"capture-file-max-size" arg:"size" help:"start a new pcapng file past this size; 0: no limit"`
	FileMaxAge  time.Duration `yaml:"file_max_age" env:"LOUPE_CAPTURE_FILE_MAX_AGE" flag:"capture-file-max-age" help:"start a new pcapng file after this long; 0: no limit"`
	MaxFiles    int           `yaml:"max_files" env:"LOUPE_CAPTURE_MAX_FILES" flag:"capture-max-files" help:"pcapng files kept, the oldest removed first; 0: no limit"`
	MaxSize     uint64        `yaml:"max_size" env:"LOUPE_CAPTURE_MAX_SIZE" flag:"capture-max-size" arg:"size" help:"total size of the pcapng files kept, the oldest removed first; 0: no limit"`
}

// DefaultConfig is the section's defaults: capture off.
func DefaultConfig() Config {
	s := datapath.DefaultCaptureSizes()
	return Config{
		MaxTriggersPerSec: 100,
		Connections:       s.Connections,
		KeepPackets:       s.KeepPackets,
		KeepBytes:         s.KeepSnap,
		KeepSlots:         s.KeepSlotsPerCPU,
		IdleTimeout:       30 * time.Second,
		MaxAge:            time.Hour,
		HTTPMaxSeries:     s.HTTPSeries,
		BufferSize:        4 << 20,
		FileMaxSize:       100 << 20,
		FileMaxAge:        time.Hour,
		MaxFiles:          100,
		MaxSize:           1 << 30,
	}
}

// Enabled reports whether the configuration asks for capture.
func (c Config) Enabled() bool {
	return c.Dir != "" || c.Mirror != "" || c.Follow || len(c.Triggers) > 0
}

// CheckKey checks one key of the section; the message does not name it.
func (c Config) CheckKey(key string) error {
	switch key {
	case "dir":
		if c.Dir == "" {
			return nil
		}
		return check.Path(c.Dir)
	case "triggers":
		_, err := parseTriggers(c.Triggers)
		return err
	case "snaplen":
		return check.Int(c.Snaplen, 0, 65000)
	case "max_triggers_per_second":
		return check.Int(c.MaxTriggersPerSec, 0, 1000000)
	case "connections":
		return check.Int(c.Connections, 64, 1<<22)
	case "keep_packets":
		return check.Int(c.KeepPackets, 0, datapath.MaxKeepPackets)
	case "keep_bytes":
		return check.Int(c.KeepBytes, 64, datapath.MaxKeepSnap)
	case "keep_slots_per_cpu":
		return check.Int(c.KeepSlots, 16, 65536)
	case "idle_timeout":
		return check.Duration(c.IdleTimeout, time.Second, 24*time.Hour)
	case "max_connection_age":
		return check.Duration(c.MaxAge, time.Second, 7*24*time.Hour)
	case "http_max_series":
		return check.Int(c.HTTPMaxSeries, 16, 1<<20)
	case "buffer_size":
		return check.Size(c.BufferSize, 64<<10, 1<<30)
	case "max_files":
		return check.Int(c.MaxFiles, 0, 1000000)
	}
	return nil
}

// parseTriggers parses the configured triggers (the default when none),
// and checks that their names differ and their rules fit the datapath.
func parseTriggers(texts []string) ([]Trigger, error) {
	if len(texts) == 0 {
		texts = []string{DefaultTrigger}
	}
	var (
		out   []Trigger
		rules int
		names = map[string]bool{}
	)
	for _, s := range texts {
		t, err := ParseTrigger(s)
		if err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, fmt.Errorf("two triggers named %q: give one a name=", t.Name)
		}
		names[t.Name] = true
		rules += len(t.rules())
		out = append(out, t)
	}
	if rules > datapath.MaxRules {
		return nil, fmt.Errorf("the triggers make %d rules (a rule per status range): at most %d", rules, datapath.MaxRules)
	}
	return out, nil
}

var errNoCapture = errors.New("capture is off: start the agent with --capture-dir, --mirror, --trigger or --capture-follow")
