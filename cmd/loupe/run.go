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

	"loupe/internal/agent"
	"loupe/internal/config"
)

func runCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "[--config FILE] [flags]", stdout, stderr)
	flags := config.BindFlags(fs)
	if err := parse(fs, args, stdout); err != nil {
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

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return agent.Run(ctx, cfg, log)
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
