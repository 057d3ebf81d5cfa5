package ui

import (
	"fmt"
	"net"
	"strconv"
)

// DefaultListen is where the UI listens unless told otherwise: loopback,
// beside the metrics listener's 127.0.0.1:9464.
const DefaultListen = "127.0.0.1:9463"

// Config is the ui section of the agent's configuration (read by the
// config package's tags).
type Config struct {
	Listen string `yaml:"listen" env:"LOUPE_UI_LISTEN" flag:"ui-listen" help:"host:port of the web UI, or none; its own listener, not the metrics one, so that Prometheus can scrape without reaching the UI; payload and changes need the token of control.token_file, and beyond loopback every request does"`
}

// DefaultConfig returns the section's defaults: on, on loopback.
func DefaultConfig() Config { return Config{Listen: DefaultListen} }

// CheckKey checks one key of the section.
func (c Config) CheckKey(key string) error {
	if key != "listen" || c.Listen == "none" {
		return nil
	}
	_, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("invalid address %q: want host:port, or \"none\" for no UI", c.Listen)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("invalid port %q in %q: want a number 0-65535", port, c.Listen)
	}
	return nil
}
