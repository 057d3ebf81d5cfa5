// Package targets opens the sink an export target names (--export URL):
// the one place that knows every exporter package, so that the agent and
// the benchmarks open exporters exactly alike.
package targets

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"loupe/internal/config"
	"loupe/internal/export"
	"loupe/internal/export/delivery"
	"loupe/internal/export/ipfix"
	"loupe/internal/export/jsonl"
	"loupe/internal/export/kafka"
	"loupe/internal/export/otlp"
)

// Open opens the sink of target. Network exporters (IPFIX, Kafka, OTLP)
// come wrapped in their delivery queue, which is also returned so that its
// counters can be exported; q is nil for the JSON sink, which writes
// synchronously to a local file.
func Open(target string, cfg config.Config, log *slog.Logger) (s export.Sink, q *delivery.Queue, err error) {
	scheme, rest, _ := strings.Cut(target, ":")
	var c delivery.Client
	switch scheme {
	case "json":
		s, err := jsonl.Open(rest)
		return s, nil, err
	case "ipfix+udp", "ipfix+tcp":
		c, err = ipfix.New(target, ipfix.Options{
			ObservationDomain: uint32(cfg.IPFIX.ObservationDomain),
			MTU:               cfg.IPFIX.MTU,
			TemplateRefresh:   cfg.IPFIX.TemplateRefresh,
			EnterpriseNumber:  uint32(cfg.IPFIX.EnterpriseNumber),
			Logger:            log,
		})
	case "kafka":
		var opts kafka.Options
		if opts, err = kafkaOptions(cfg.Kafka, log); err == nil {
			c, err = kafka.New(target, opts)
		}
	case "otlp":
		c, err = otlp.New(target, otlpOptions(cfg.OTLP, log))
	default:
		return nil, nil, fmt.Errorf("export %q: unsupported sink", target)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("export %s: %w", target, err)
	}
	q = delivery.New(target, c, delivery.Options{
		QueueSize:       cfg.Delivery.QueueSize,
		BatchSize:       cfg.Delivery.BatchSize,
		MaxLinger:       cfg.Delivery.MaxLinger,
		RetryMax:        cfg.Delivery.RetryMax,
		ShutdownTimeout: shutdownTimeout(cfg.Delivery.ShutdownTimeout),
		Logger:          log,
	})
	return q, q, nil
}

// shutdownTimeout maps the configuration's 0 ("do not wait") to the
// smallest wait the queue knows: the queue's own zero means its default.
func shutdownTimeout(d time.Duration) time.Duration {
	return max(d, time.Nanosecond)
}

func kafkaOptions(k config.Kafka, log *slog.Logger) (kafka.Options, error) {
	opts := kafka.Options{
		Compression:   k.Compression,
		BatchMaxBytes: int32(k.BatchMaxBytes),
		Linger:        k.Linger,
		ClientID:      k.ClientID,
		TLS: kafka.TLSOptions{
			Enable:             k.TLS.Enabled,
			CAFile:             k.TLS.CAFile,
			CertFile:           k.TLS.CertFile,
			KeyFile:            k.TLS.KeyFile,
			InsecureSkipVerify: k.TLS.InsecureSkipVerify,
			ServerName:         k.TLS.ServerName,
		},
		Logger: log,
	}
	if (k.SASL.Mechanism == "none" || k.SASL.Mechanism == "") && (k.SASL.Username != "" || k.SASL.PasswordFile != "") {
		return opts, errors.New("kafka.sasl.username or password_file is set but kafka.sasl.mechanism is none")
	}
	if k.SASL.Mechanism != "none" && k.SASL.Mechanism != "" {
		if k.SASL.Username == "" || k.SASL.PasswordFile == "" {
			return opts, fmt.Errorf("kafka.sasl.mechanism %s needs kafka.sasl.username and kafka.sasl.password_file", k.SASL.Mechanism)
		}
		pw, err := os.ReadFile(k.SASL.PasswordFile)
		if err != nil {
			return opts, fmt.Errorf("kafka.sasl.password_file: %w", err)
		}
		opts.SASL = kafka.SASLOptions{
			Mechanism: k.SASL.Mechanism,
			Username:  k.SASL.Username,
			Password:  strings.TrimRight(string(pw), "\r\n"),
		}
	}
	return opts, nil
}

func otlpOptions(o config.OTLP, log *slog.Logger) otlp.Options {
	headers := make(map[string]string, len(o.Headers))
	for _, h := range o.Headers {
		k, v, _ := strings.Cut(h, "=")
		headers[k] = v
	}
	return otlp.Options{
		// As for Kafka, any TLS setting turns TLS on.
		TLS:                o.TLS.Enabled || o.TLS.CAFile != "" || o.TLS.CertFile != "" || o.TLS.KeyFile != "" || o.TLS.ServerName != "" || o.TLS.InsecureSkipVerify,
		CAFile:             o.TLS.CAFile,
		CertFile:           o.TLS.CertFile,
		KeyFile:            o.TLS.KeyFile,
		ServerName:         o.TLS.ServerName,
		InsecureSkipVerify: o.TLS.InsecureSkipVerify,
		Headers:            headers,
		Compression:        o.Compression,
		Logger:             log,
	}
}
