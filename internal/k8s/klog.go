package k8s

import (
	"context"
	"log/slog"

	"k8s.io/klog/v2"
)

// routeKlog sends client-go's own log lines (it logs through klog, to
// stderr by default, in its own format) to the agent's logger, at debug
// level: what they report (a watch broken, a list retried) the resolver
// reports itself once per outage, at warn, and counts.
//
// klog's output is process-wide; this package is the only user of
// client-go in the agent, so it is the one to set it, once it runs.
func routeKlog(log *slog.Logger) {
	klog.SetSlogLogger(slog.New(debugOnly{log.With("component", "k8s/client-go").Handler()}))
}

// debugOnly logs every record at debug level.
type debugOnly struct{ h slog.Handler }

func (d debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugOnly) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return debugOnly{d.h.WithAttrs(attrs)}
}

func (d debugOnly) WithGroup(name string) slog.Handler { return debugOnly{d.h.WithGroup(name)} }
