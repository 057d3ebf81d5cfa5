package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/export/delivery"
	"loupe/internal/flow"
)

func TestPrivilegeErrorDropsMemlockHint(t *testing.T) {
	// The text cilium/ebpf gives an unprivileged map creation.
	eperm := fmt.Errorf("load datapath: map create: %w (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", syscall.EPERM)
	err := privilegeError("", eperm)
	want := "load datapath: map create: operation not permitted (loupe run needs CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, or root)"
	if err.Error() != want || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("%q (is EPERM: %v), want %q", err, errors.Is(err, os.ErrPermission), want)
	}
	if err := privilegeError("attach: ", syscall.ENODEV); err.Error() != "attach: no such device" || !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("other error: %v", err)
	}
}

// refusing is a delivery client whose collector is always away.
type refusing struct{}

func (refusing) Send(_ context.Context, b []flow.Record) ([]flow.Record, error) {
	return b, syscall.ECONNREFUSED
}
func (refusing) Close() error { return nil }

func TestShutdownLogsWhatIsAbandoned(t *testing.T) {
	q := delivery.New("ipfix+tcp://192.0.2.1:4739", refusing{}, delivery.Options{RetryMin: time.Hour, ShutdownTimeout: time.Millisecond})
	defer q.Close()
	if err := q.Write(context.Background(), make([]flow.Record, 37)); err != nil {
		t.Fatal(err)
	}
	var sd Shutdown
	sd.update(func(s *Shutdown) {
		s.queues = []*delivery.Queue{q}
		s.stopping, s.detached, s.evicting = true, true, true
	})
	var buf bytes.Buffer
	sd.LogAbandoned(slog.New(slog.NewTextHandler(&buf, nil)))
	for _, want := range []string{
		`exporter=ipfix+tcp://192.0.2.1:4739 queued=37`,
		`shutdown_started=true detached=true final_eviction=interrupted queued_records=37`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}
