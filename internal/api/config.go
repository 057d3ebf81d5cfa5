package api

import (
	"fmt"
	"net"
	"strconv"

	"loupe/internal/config/check"
)

// DefaultSocket is where the agent serves the API and where the CLI looks
// for it.
const DefaultSocket = "/run/loupe/loupe.sock"

// None disables the socket or the TCP listener.
const None = "none"

// SocketEnv names the socket for the CLI's commands, as for the agent:
// --control wins over it.
const SocketEnv = "LOUPE_CONTROL_SOCKET"

// maxSocketPath is the longest path a unix socket address holds
// (sun_path is 108 bytes, its terminating NUL included).
const maxSocketPath = 107

// Config is the control section of the agent's configuration. The tags are
// read by the config package: yaml is the key, env and flag its
// environment variable and flag, help the flag's description.
type Config struct {
	Socket    string `yaml:"socket" env:"LOUPE_CONTROL_SOCKET" flag:"control" arg:"path" help:"unix socket path of the control API (loupe status and live commands), or none to disable; mode 0600, the agent's user"`
	Listen    string `yaml:"listen" env:"LOUPE_CONTROL_LISTEN" flag:"control-listen" help:"TCP host:port of the control API, or none; every request then needs the bearer token of control.token_file"`
	TokenFile string `yaml:"token_file" env:"LOUPE_CONTROL_TOKEN_FILE" flag:"control-token-file" arg:"file" help:"file holding the bearer token for control.listen, mode 0600 (no group or other bits), read at start"`
}

// DefaultConfig returns the section's defaults: the socket on, TCP off.
func DefaultConfig() Config {
	return Config{Socket: DefaultSocket, Listen: None}
}

// CheckKey checks the value of one key of the section (relative to it).
// The message does not name the key: the config package prefixes it with
// the key and the layer it came from. That control.listen needs
// control.token_file is checked at start (Listen), so that each key can
// be set alone in any layer.
func (c Config) CheckKey(key string) error {
	switch key {
	case "socket":
		return checkSocket(c.Socket)
	case "listen":
		return checkListen(c.Listen)
	case "token_file":
		return check.Path(c.TokenFile)
	}
	return nil
}

func checkSocket(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("must not be empty (use %q to disable the control socket)", None)
	case p == None:
		return nil
	case len(p) > maxSocketPath:
		return fmt.Errorf("%d bytes long: a unix socket path holds at most %d", len(p), maxSocketPath)
	}
	return check.Path(p)
}

func checkListen(addr string) error {
	if addr == None || addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid address %s: want host:port, or %q for no TCP listener", check.Quote(addr), None)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("invalid port %s in %s: want a number 0-65535", check.Quote(port), check.Quote(addr))
	}
	return nil
}
