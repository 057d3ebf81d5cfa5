package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"loupe/internal/config/check"
	"loupe/internal/export/tlsconf"
)

// Scheme is the target URL scheme of this exporter.
const Scheme = "kafka"

// Syntax is the form of a kafka:// target, as errors and help show it.
const Syntax = "kafka://BROKER[,BROKER]/TOPIC[?format=protobuf|json]"

// Config is the kafka section of the agent's configuration. The tags are
// read by the config package: yaml is the key, env and flag its
// environment variable and flag, help the flag's description.
type Config struct {
	Compression   string         `yaml:"compression" env:"LOUPE_KAFKA_COMPRESSION" flag:"kafka-compression" help:"record batch compression: none, gzip, snappy, lz4 or zstd"`
	BatchMaxBytes uint64         `yaml:"batch_max_bytes" env:"LOUPE_KAFKA_BATCH_MAX_BYTES" arg:"size" flag:"kafka-batch-max-bytes" help:"largest record batch sent to one partition, a size 1KiB..64MiB"`
	Linger        time.Duration  `yaml:"linger" env:"LOUPE_KAFKA_LINGER" flag:"kafka-linger" help:"how long the producer waits to fill a partition's batch, 0s..10s (0: send as soon as the delivery queue hands over a batch)"`
	ClientID      string         `yaml:"client_id" env:"LOUPE_KAFKA_CLIENT_ID" flag:"kafka-client-id" help:"client ID sent to the brokers"`
	TLS           tlsconf.Config `yaml:"tls" env:"LOUPE_KAFKA_TLS_" flag:"kafka-tls-"`
	SASL          SASLConfig     `yaml:"sasl"`
}

// SASLConfig is the kafka.sasl section.
type SASLConfig struct {
	Mechanism    string `yaml:"mechanism" env:"LOUPE_KAFKA_SASL_MECHANISM" flag:"kafka-sasl-mechanism" help:"SASL mechanism: none, plain, scram-sha-256 or scram-sha-512"`
	Username     string `yaml:"username" env:"LOUPE_KAFKA_SASL_USERNAME" flag:"kafka-sasl-username" help:"SASL user name"`
	PasswordFile string `yaml:"password_file" env:"LOUPE_KAFKA_SASL_PASSWORD_FILE" flag:"kafka-sasl-password-file" help:"file holding the SASL password (never given inline, so it stays out of process listings and config dumps)"`
}

// maxPasswordFile bounds kafka.sasl.password_file: a password, not a
// mistaken path to a large file.
const maxPasswordFile = 64 << 10

// saslNone is the configuration's value for "no SASL".
const saslNone = "none"

// DefaultConfig returns the section's defaults, those of Options.
func DefaultConfig() Config {
	return Config{
		Compression:   DefaultCompression,
		BatchMaxBytes: DefaultBatchMaxBytes,
		Linger:        DefaultLinger,
		ClientID:      DefaultClientID,
		SASL:          SASLConfig{Mechanism: saslNone},
	}
}

// CheckKey checks the value of one key of the section (relative to it:
// "linger", "sasl.mechanism"). The message does not name the key: the
// config package prefixes it with the key and the layer it came from.
func (c Config) CheckKey(key string) error {
	switch key {
	case "compression":
		return check.OneOf(c.Compression, Compressions()...)
	case "batch_max_bytes":
		return check.Size(c.BatchMaxBytes, MinBatchMaxBytes, MaxBatchMaxBytes)
	case "linger":
		return check.Duration(c.Linger, 0, MaxLinger)
	case "client_id":
		return check.NotEmpty(c.ClientID)
	case "sasl.mechanism":
		return check.OneOf(c.SASL.Mechanism, saslNone, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	case "sasl.password_file":
		return check.Path(c.SASL.PasswordFile)
	}
	return nil
}

// checkSASL checks what no single key can: SASL needs a user and a
// password, and a user or password needs a mechanism. It runs when the
// exporter starts, so that each key can be set alone in the layers.
// Messages name the key relative to the section.
func (c Config) checkSASL() error {
	s := c.SASL
	if s.Mechanism == saslNone || s.Mechanism == "" {
		if s.Username != "" || s.PasswordFile != "" {
			return errors.New("sasl.mechanism: none, but sasl.username or sasl.password_file is set")
		}
		return nil
	}
	if s.Username == "" || s.PasswordFile == "" {
		return fmt.Errorf("sasl.mechanism: %s needs sasl.username and sasl.password_file", s.Mechanism)
	}
	return nil
}

// Options returns the client options of the section. It reads the SASL
// password file, so a missing file fails at start; errors name the key.
func (c Config) Options(log *slog.Logger) (Options, error) {
	if err := c.checkSASL(); err != nil {
		return Options{}, fmt.Errorf("kafka.%w", err)
	}
	opts := Options{
		Compression:   c.Compression,
		BatchMaxBytes: int32(min(c.BatchMaxBytes, MaxBatchMaxBytes)),
		Linger:        c.Linger,
		ClientID:      c.ClientID,
		TLS:           c.TLS,
		Logger:        log,
	}
	if c.SASL.Mechanism != saslNone && c.SASL.Mechanism != "" {
		pw, err := check.ReadFile(c.SASL.PasswordFile, maxPasswordFile)
		if err != nil {
			return opts, fmt.Errorf("kafka.sasl.password_file: %w", err)
		}
		opts.SASL = SASLOptions{
			Mechanism: c.SASL.Mechanism,
			Username:  c.SASL.Username,
			Password:  strings.TrimRight(string(pw), "\r\n"),
		}
	}
	return opts, nil
}
