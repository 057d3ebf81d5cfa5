package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// logger passes franz-go's log lines to slog.
//
// During an outage franz-go warns on every retry, for every partition,
// about once a second; the delivery queue already reports each failed
// Send, with its error, at most once per LogInterval. So franz-go's errors
// become warnings, and its warnings and info lines are passed only when
// debug logging is on. Its own debug lines (several per request) never are.
type logger struct {
	log *slog.Logger
}

func (l *logger) Level() kgo.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelError
}

func (l *logger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelDebug
	if level == kgo.LogLevelError {
		lvl = slog.LevelWarn
	}
	l.log.Log(context.Background(), lvl, "kafka client: "+msg, keyvals...)
}
