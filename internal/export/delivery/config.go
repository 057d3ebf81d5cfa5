package delivery

import (
	"log/slog"
	"time"

	"loupe/internal/config/check"
)

// Config is the delivery section of the agent's configuration: the queue
// in front of every network exporter (IPFIX, Kafka, OTLP), each exporter
// having its own queue with these settings. The tags are read by the
// config package: yaml is the key, env and flag its environment variable
// and flag, help the flag's description.
type Config struct {
	QueueSize       int           `yaml:"queue_size" env:"LOUPE_EXPORT_QUEUE_SIZE" flag:"export-queue-size" help:"flow records each network exporter holds while its collector is slow or away; more are dropped and counted, 1..16777216"`
	BatchSize       int           `yaml:"batch_size" env:"LOUPE_EXPORT_BATCH_SIZE" flag:"export-batch-size" help:"most flow records per send, 1..queue_size"`
	MaxLinger       time.Duration `yaml:"max_linger" env:"LOUPE_EXPORT_MAX_LINGER" flag:"export-max-linger" help:"longest a record waits for a fuller batch, 1ms..1m"`
	RetryMax        time.Duration `yaml:"retry_max" env:"LOUPE_EXPORT_RETRY_MAX" flag:"export-retry-max" help:"longest back-off between retries of a failed send, 100ms..10m"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" env:"LOUPE_EXPORT_SHUTDOWN_TIMEOUT" flag:"export-shutdown-timeout" help:"how long shutdown waits for exporters to deliver what they hold, 0s..10m"`
}

// DefaultConfig returns the section's defaults, those of Options.
func DefaultConfig() Config {
	return Config{
		QueueSize:       DefaultQueueSize,
		BatchSize:       DefaultBatchSize,
		MaxLinger:       DefaultMaxLinger,
		RetryMax:        DefaultRetryMax,
		ShutdownTimeout: DefaultShutdownTimeout,
	}
}

// CheckKey checks the value of one key of the section (relative to it).
// The message does not name the key: the config package prefixes it with
// the key and the layer it came from. A batch_size above queue_size is
// not an error: the queue sends at most queue_size records at a time.
func (c Config) CheckKey(key string) error {
	switch key {
	case "queue_size":
		return check.Int(c.QueueSize, 1, 1<<24)
	case "batch_size":
		return check.Int(c.BatchSize, 1, 1<<24)
	case "max_linger":
		return check.Duration(c.MaxLinger, time.Millisecond, time.Minute)
	case "retry_max":
		return check.Duration(c.RetryMax, 100*time.Millisecond, 10*time.Minute)
	case "shutdown_timeout":
		return check.Duration(c.ShutdownTimeout, 0, 10*time.Minute)
	}
	return nil
}

// Options returns the queue options of the section.
func (c Config) Options(log *slog.Logger) Options {
	return Options{
		QueueSize: c.QueueSize,
		BatchSize: c.BatchSize,
		MaxLinger: c.MaxLinger,
		RetryMax:  c.RetryMax,
		// The configuration's 0 means "do not wait": the smallest wait
		// the queue knows, since its own zero means its default.
		ShutdownTimeout: max(c.ShutdownTimeout, time.Nanosecond),
		Logger:          log,
	}
}
