package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cilium/ebpf"
)

// grace waits out the programs running now. It is an array-of-maps that no
// program uses: updating it makes the kernel wait for an RCU grace period
// (maybe_wait_bpf_programs), and a program that is not sleepable runs
// inside one, so once the update returns no program that read a table
// switch before it can still be running. The flow tables' swap, the rule
// sets' and the kernel signals' all rely on it.
type grace struct {
	outer, inner *ebpf.Map
	log          *slog.Logger
}

// graceFallback is how long a wait lasts when the kernel refuses the
// grace-period map update: a program runs for microseconds, so waiting far
// longer is a safe, if unproven, grace period.
const graceFallback = 50 * time.Millisecond

func newGrace(log *slog.Logger) (*grace, error) {
	g := &grace{log: log}
	inner := &ebpf.MapSpec{Name: "loupe_grace_in", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	var err error
	if g.inner, err = ebpf.NewMap(inner); err != nil {
		return nil, fmt.Errorf("create grace-period map: %w", err)
	}
	g.outer, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "loupe_grace", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1, InnerMap: inner,
	})
	if err != nil {
		g.inner.Close()
		return nil, fmt.Errorf("create grace-period map: %w", err)
	}
	return g, nil
}

// wait returns once every program that could have read a table switch
// before now has finished.
func (g *grace) wait() {
	if err := g.outer.Update(uint32(0), g.inner, ebpf.UpdateAny); err != nil {
		g.log.Warn("waiting for running programs failed; waiting a fixed time instead", "wait", graceFallback, "err", err)
		time.Sleep(graceFallback)
	}
}

func (g *grace) close() error {
	if g == nil {
		return nil
	}
	return errors.Join(g.outer.Close(), g.inner.Close())
}
