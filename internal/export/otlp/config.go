package otlp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"loupe/internal/config/check"
	"loupe/internal/export/tlsconf"
)

// Config is the otlp section of the agent's configuration. The tags are
// read by the config package: yaml is the key, env and flag its
// environment variable and flag, help the flag's description; secret
// marks a key whose values --print-config must not show.
type Config struct {
	Compression string         `yaml:"compression" env:"LOUPE_OTLP_COMPRESSION" flag:"otlp-compression" help:"gRPC compression: none or gzip"`
	Headers     []string       `yaml:"headers" env:"LOUPE_OTLP_HEADERS" flag:"otlp-header" arg:"key=value" secret:"value" help:"gRPC metadata key=value sent with every export, e.g. for a collector's auth (values are redacted by --print-config; prefer headers_file for secrets)"`
	HeadersFile string         `yaml:"headers_file" env:"LOUPE_OTLP_HEADERS_FILE" flag:"otlp-headers-file" arg:"file" help:"file of gRPC metadata, one key=value per line (# comments), sent with every export: keeps an auth token out of the configuration and process listings; mode 0600 advised"`
	TLS         tlsconf.Config `yaml:"tls" env:"LOUPE_OTLP_TLS_" flag:"otlp-tls-"`
}

// maxHeadersFile bounds otlp.headers_file: a few tokens, not a mistaken
// path to a large file.
const maxHeadersFile = 64 << 10

// DefaultConfig returns the section's defaults.
func DefaultConfig() Config {
	return Config{Compression: CompressionNone}
}

// CheckKey checks the value of one key of the section (relative to it).
// The message does not name the key: the config package prefixes it with
// the key and the layer it came from.
func (c Config) CheckKey(key string) error {
	switch key {
	case "compression":
		return check.OneOf(c.Compression, CompressionNone, CompressionGzip)
	case "headers":
		_, err := parseHeaders(c.Headers)
		return err
	case "headers_file":
		return check.Path(c.HeadersFile)
	}
	return nil
}

// parseHeaders reads key=value entries into a map with lowercase keys
// (gRPC lowercases them anyway), checking each with gRPC's rules.
func parseHeaders(entries []string) (map[string]string, error) {
	h := make(map[string]string, len(entries))
	for i, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			// Not shown: an entry without '=' may be a bare token.
			return nil, fmt.Errorf("entry %d is not key=value", i+1)
		}
		if err := checkHeader(k, v); err != nil {
			return nil, err
		}
		k = strings.ToLower(k)
		if _, dup := h[k]; dup {
			return nil, fmt.Errorf("header %s given twice", check.Quote(k))
		}
		h[k] = v
	}
	return h, nil
}

// Options returns the client options of the section. It reads
// headers_file, so a missing or malformed file fails at start; errors name
// the key.
func (c Config) Options(log *slog.Logger) (Options, error) {
	headers, err := parseHeaders(c.Headers)
	if err != nil {
		return Options{}, fmt.Errorf("otlp.headers: %w", err)
	}
	if c.HeadersFile != "" {
		fromFile, err := readHeadersFile(c.HeadersFile, log)
		if err != nil {
			return Options{}, fmt.Errorf("otlp.headers_file %s: %w", c.HeadersFile, err)
		}
		for k, v := range fromFile {
			if _, dup := headers[k]; dup {
				return Options{}, fmt.Errorf("otlp.headers_file %s: header %s is also in otlp.headers", c.HeadersFile, check.Quote(k))
			}
			headers[k] = v
		}
	}
	return Options{
		TLS:         c.TLS,
		Headers:     headers,
		Compression: c.Compression,
		Logger:      log,
	}, nil
}

// readHeadersFile reads key=value lines; blank lines and lines starting
// with # are skipped, and so is the space around keys and values.
func readHeadersFile(path string, log *slog.Logger) (map[string]string, error) {
	data, err := check.ReadFile(path, maxHeadersFile)
	if err != nil {
		return nil, unwrapPath(err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && log != nil {
		log.Warn("otlp.headers_file is readable by other users: it holds credentials, make it 0600",
			"component", "export.otlp", "file", path, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
	var entries []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxHeadersFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d is not key=value", n)
		}
		entries = append(entries, strings.TrimSpace(k)+"="+strings.TrimSpace(v))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return parseHeaders(entries)
}

// unwrapPath drops the path from a file error: the caller names the file.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
