package attach

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tcAttacher is the fallback for kernels without TCX: a clsact qdisc (added
// if missing, never removed, since other filters may hang off it) and one
// direct-action cls_bpf filter per direction, under a handle of our own.
type tcAttacher struct{}

const (
	filterName   = "loupe_flows"
	filterHandle = 0x4c50 // "LP"
	headPrio     = 1
	tailPrio     = 0xC000
)

func (tcAttacher) mode() Mode { return TC }

func (tcAttacher) attach(ifindex int, progs Programs, pos Position) (io.Closer, error) {
	qdisc := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: ifindex,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		},
		QdiscType: "clsact",
	}
	if err := netlink.QdiscAdd(qdisc); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("add clsact qdisc: %w", err)
	}
	prio := uint16(headPrio)
	if pos == Tail {
		prio = tailPrio
	}
	var filters closers
	for _, h := range []struct {
		prog   *ebpf.Program
		parent uint32
		name   string
	}{
		{progs.Ingress, netlink.HANDLE_MIN_INGRESS, "ingress"},
		{progs.Egress, netlink.HANDLE_MIN_EGRESS, "egress"},
	} {
		f := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{
				LinkIndex: ifindex,
				Parent:    h.parent,
				Handle:    filterHandle,
				Priority:  prio,
				Protocol:  unix.ETH_P_ALL,
			},
			Fd:           h.prog.FD(),
			Name:         filterName,
			DirectAction: true,
		}
		if err := addFilter(f); err != nil {
			filters.Close()
			return nil, fmt.Errorf("tc %s: %w", h.name, err)
		}
		filters = append(filters, tcFilter{f})
	}
	return filters, nil
}

// addFilter adds f, replacing a filter at the same place only if it is ours
// (left by an agent that crashed: cls_bpf filters outlive their creator).
func addFilter(f *netlink.BpfFilter) error {
	err := netlink.FilterAdd(f)
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	link, lerr := netlink.LinkByIndex(f.LinkIndex)
	if lerr != nil {
		return err
	}
	existing, lerr := netlink.FilterList(link, f.Parent)
	if lerr != nil {
		return err
	}
	for _, e := range existing {
		b, ok := e.(*netlink.BpfFilter)
		if ok && b.Priority == f.Priority && isOurs(b) {
			// Replacing a cls_bpf filter's program is atomic: the
			// kernel swaps the filter in place (cls_bpf_change).
			return netlink.FilterReplace(f)
		}
	}
	return fmt.Errorf("a filter that is not ours holds priority %d handle %#x: %w", f.Priority, f.Handle, err)
}

// isOurs reports whether a filter is one this agent (or an earlier one)
// added.
func isOurs(b *netlink.BpfFilter) bool { return b.Handle == filterHandle && b.Name == filterName }

type tcFilter struct{ f *netlink.BpfFilter }

func (t tcFilter) Close() error {
	err := netlink.FilterDel(t.f)
	if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
		return nil // the interface (and its filters) went away first
	}
	return err
}
