package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"loupe/internal/agent"
	"loupe/internal/cli"
	"loupe/internal/config"
)

func runCmd(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("run", "[--config FILE] [flags]", stdout, stderr)
	flags := config.BindFlags(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	cfg, err := config.Load(flags, os.Environ())
	if err != nil {
		return err
	}
	if flags.PrintConfig() {
		fmt.Fprint(stdout, cfg.String())
		return nil
	}
	log := newLogger(stderr, cfg)
	log.Info("starting", "version", version())
	if os.Getenv("GOGC") == "" {
		// The agent's heap is mostly one eviction's records, garbage a
		// moment later: collecting at 1.5x the live heap instead of 2x
		// keeps its footprint small for little CPU (bench/RESULTS.md,
		// section 5). GOGC in the environment overrides this.
		debug.SetGCPercent(gcPercent)
	}

	return runAgent(cfg, log)
}

// runAgent runs the agent until SIGINT or SIGTERM, then lets it shut down
// gracefully. A second signal during the shutdown (a flush waiting for an
// unreachable collector, say) exits at once, after logging what is lost.
func runAgent(cfg config.Config, log *slog.Logger) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sd agent.Shutdown
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg, log, &sd, version()) }()
	for {
		select {
		case err := <-done:
			return err
		case sig := <-sigs:
			name := unix.SignalName(sig.(syscall.Signal))
			if ctx.Err() == nil {
				log.Info("signal received; send it again to exit without finishing the shutdown", "signal", name)
				cancel()
				continue
			}
			sd.LogAbandoned(log)
			// Returning ends the process: main exits with the agent's
			// goroutines still running, which is the point.
			return fmt.Errorf("second %s during shutdown: exited before finishing it", name)
		}
	}
}

// gcPercent is the agent's default GOGC.
const gcPercent = 50

func newLogger(w io.Writer, cfg config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(cfg.LogLevel))) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
