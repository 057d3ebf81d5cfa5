package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"loupe/internal/config/check"
	"loupe/internal/export/tlsconf"
)

// Defaults of Options, chosen by measurement (docs/exporters/kafka.md).
const (
	DefaultCompression     = "zstd"
	DefaultBatchMaxBytes   = 1 << 20
	DefaultLinger          = 0
	DefaultClientID        = "loupe"
	DefaultDeliveryTimeout = 30 * time.Second
)

// Bounds of Options, the same for the configuration (kafka.*) and for
// code that builds Options itself.
const (
	// MinBatchMaxBytes and MaxBatchMaxBytes bound BatchMaxBytes: below
	// 1 KiB a batch holds a handful of records; 64 MiB is far above any
	// broker's default max.message.bytes (1 MiB) and bounds what one
	// partition's batch can hold in memory.
	MinBatchMaxBytes = 1 << 10
	MaxBatchMaxBytes = 64 << 20
	// MaxLinger bounds Linger: records already waited in the delivery
	// queue, so a longer wait only adds latency.
	MaxLinger = 10 * time.Second
)

// Options tune the Kafka client. Zero values take the defaults.
type Options struct {
	// Compression of record batches: none, gzip, snappy, lz4 or zstd
	// [zstd]. On flow records zstd (at its fastest level) writes 35 %
	// fewer bytes than lz4 or snappy, which matters on the wire and on
	// the brokers' disks, for about 0.2 µs more CPU per record than lz4
	// and 0.65 µs more than snappy (BenchmarkSend).
	Compression string
	// BatchMaxBytes bounds one record batch (one partition's share of a
	// produce request) before compression [1 MiB]. It must not exceed the
	// topic's max.message.bytes (1 MiB + 12 by default).
	BatchMaxBytes int32
	// Linger is how long a partition's batch waits for more records
	// before it is sent [0]. Send waits for its whole batch and the
	// delivery queue already gathers records into batches, so by default
	// nothing lingers; a positive value trades latency for fuller batches
	// when Send is called with few records at a time.
	Linger time.Duration
	// TLS to the brokers; on if any of its settings is (tlsconf.Config.On).
	TLS  tlsconf.Config
	SASL SASLOptions
	// ClientID names the client in the broker's logs and quotas [loupe].
	ClientID string
	// DeliveryTimeout bounds how long the client keeps retrying a record
	// before it fails it back to Send's caller (who retries it later)
	// [30s]. With idempotent writes a record already sent is only failed
	// once the broker's answer (or the connection's loss) says it is safe.
	DeliveryTimeout time.Duration
	// Logger receives the client's warnings, with component=kafka.
	Logger *slog.Logger
}

// SASL mechanisms.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// SASLOptions configure SASL authentication. The password comes from the
// caller (a file or the environment), never from the target URL.
type SASLOptions struct {
	// Mechanism is plain, scram-sha-256 or scram-sha-512; empty disables
	// SASL.
	Mechanism string
	Username  string
	Password  string
}

func (o *Options) setDefaults() {
	if o.Compression == "" {
		o.Compression = DefaultCompression
	}
	if o.BatchMaxBytes == 0 {
		o.BatchMaxBytes = DefaultBatchMaxBytes
	}
	if o.ClientID == "" {
		o.ClientID = DefaultClientID
	}
	if o.DeliveryTimeout == 0 {
		o.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// zstdFastest is klauspost/compress zstd.SpeedFastest, the level franz-go
// passes to it.
const zstdFastest = 1

// Compressions are the values of Options.Compression.
func Compressions() []string { return []string{"none", "gzip", "snappy", "lz4", "zstd"} }

// compression maps an option value to franz-go's codec.
func compression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		// The fastest level: on flow records it costs 15 % less CPU
		// than the default level for 2 % more bytes (BenchmarkSend).
		return kgo.ZstdCompression().WithLevel(zstdFastest), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("unknown compression %q (want none, gzip, snappy, lz4 or zstd)", name)
}

// kgoOpts turns a target and options (with defaults set) into franz-go
// options. It reads the TLS files, so a missing file fails at start.
//
// Producer semantics chosen here, and why:
//   - acks=all and idempotent writes (franz-go's defaults, kept explicitly):
//     a record is acknowledged only once every in-sync replica has it, and
//     the client's own retries after a lost connection (a broker restart)
//     are deduplicated by the broker instead of written twice. This costs
//     an InitProducerID at connect and needs the IDEMPOTENT_WRITE (Kafka
//     before 3.0) or WRITE permission.
//   - AllowIdempotentProduceCancellation: when a Send's context ends,
//     franz-go may fail records it already tried to send, instead of
//     holding them until the broker answers. Send reports them as failed
//     and the queue retries them, so without it franz-go could deliver
//     them too (in TestSendAbandonedByContext it delivered 252 of 300),
//     a duplicate for every record of an outage longer than SendTimeout.
//     A record that did reach the broker before the cancellation can
//     still be duplicated, as the delivery contract allows.
//   - records are keyed by flow and partitioned by the key's murmur2 hash,
//     as the Java client does, so one flow's records share a partition.
func kgoOpts(t Target, o *Options, log *slog.Logger) ([]kgo.Opt, error) {
	codec, err := compression(o.Compression)
	if err != nil {
		return nil, err
	}
	if err := check.Size(uint64(max(o.BatchMaxBytes, 0)), MinBatchMaxBytes, MaxBatchMaxBytes); err != nil {
		return nil, fmt.Errorf("batch max bytes %d out of range: %w", o.BatchMaxBytes, err)
	}
	if err := check.Duration(o.Linger, 0, MaxLinger); err != nil {
		return nil, fmt.Errorf("linger: %w", err)
	}
	if o.DeliveryTimeout < time.Second {
		return nil, fmt.Errorf("delivery timeout %s is below franz-go's minimum of 1s", o.DeliveryTimeout)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(t.Brokers...),
		kgo.DefaultProduceTopic(t.Topic),
		kgo.ClientID(o.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(o.BatchMaxBytes),
		kgo.ProducerLinger(o.Linger),
		kgo.RecordDeliveryTimeout(o.DeliveryTimeout),
		// Reconnect within about a second of a broker's return, like the
		// Java client (retry.backoff.ms 100, retry.backoff.max.ms 1000):
		// franz-go's own back-off grows to 5 s, and it refreshes metadata
		// (to find a partition's new leader) at most every 5 s.
		kgo.RetryBackoffFn(retryBackoff),
		kgo.MetadataMinAge(time.Second),
		kgo.WithLogger(&logger{log: log}),
	}
	if o.TLS.On() {
		cfg, err := o.TLS.ClientConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if o.SASL.Mechanism != "" {
		m, err := saslMechanism(o.SASL)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	} else if o.SASL.Username != "" || o.SASL.Password != "" {
		return nil, errors.New("SASL username or password given without a mechanism (plain, scram-sha-256 or scram-sha-512)")
	}
	return opts, nil
}

// retryBackoff doubles from 100 ms to 1 s, with ±20 % jitter so that many
// agents do not retry in step.
func retryBackoff(fails int) time.Duration {
	d := 100 * time.Millisecond << min(max(fails-1, 0), 4)
	d = min(d, time.Second)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

func saslMechanism(o SASLOptions) (sasl.Mechanism, error) {
	if o.Username == "" {
		return nil, fmt.Errorf("sasl %s: no username", o.Mechanism)
	}
	switch o.Mechanism {
	case SASLPlain:
		return plain.Auth{User: o.Username, Pass: o.Password}.AsMechanism(), nil
	case SASLScramSHA256:
		return scram.Auth{User: o.Username, Pass: o.Password}.AsSha256Mechanism(), nil
	case SASLScramSHA512:
		return scram.Auth{User: o.Username, Pass: o.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown sasl mechanism %q (want plain, scram-sha-256 or scram-sha-512)", o.Mechanism)
}
