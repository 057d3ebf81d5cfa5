package attach

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Pinned TCX links outlive the agent: the programs keep counting while no
// agent runs, and the next agent adopts the links, swapping its own
// programs in with a link update, which replaces the program in place
// (the link keeps its place in the chain, and no packet meets neither
// program). Pins are named <ifindex>-<ingress|egress> in Config.PinDir.
//
// cls_bpf filters need no pins: they stay in the kernel anyway, and the
// next agent replaces the program of a filter of its own (tc.go).

// adoptedLinks are the pinned links of one interface, until the manager
// updates them (the interface is monitored) or detaches them.
type adoptedLinks struct {
	ingress, egress link.Link
}

func linkPin(dir string, ifindex int, direction string) string {
	return filepath.Join(dir, strconv.Itoa(ifindex)+"-"+direction)
}

// loadPinnedLinks loads every TCX link pinned in dir. A link whose
// interface is gone is detached already: its pin is removed.
func loadPinnedLinks(dir string, log *slog.Logger) map[int]*adoptedLinks {
	out := make(map[int]*adoptedLinks)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("cannot list pinned links", "dir", dir, "err", err)
		}
		return out
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) {
			log.Warn("ignoring a pin that is not a link of this agent's user", "pin", path)
			continue
		}
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			log.Warn("cannot load pinned link; removing its pin", "pin", path, "err", err)
			os.Remove(path)
			continue
		}
		info, err := l.Info()
		var tcx *link.TCXInfo
		if err == nil {
			tcx = info.TCX()
		}
		if tcx == nil || tcx.Ifindex == 0 {
			// The interface went away (the link is defunct), or it is
			// not a TCX link: nothing of ours to adopt.
			l.Unpin()
			l.Close()
			continue
		}
		a := out[int(tcx.Ifindex)]
		if a == nil {
			a = &adoptedLinks{}
			out[int(tcx.Ifindex)] = a
		}
		switch ebpf.AttachType(tcx.AttachType) {
		case ebpf.AttachTCXIngress:
			a.ingress = l
		case ebpf.AttachTCXEgress:
			a.egress = l
		default:
			l.Unpin()
			l.Close()
		}
	}
	return out
}

// update swaps the programs of both links. On failure the links are left
// as they were, for the caller to detach.
func (a *adoptedLinks) update(progs Programs) (io.Closer, error) {
	if a.ingress == nil || a.egress == nil {
		return nil, errors.New("only one direction is pinned")
	}
	if err := a.ingress.Update(progs.Ingress); err != nil {
		return nil, fmt.Errorf("update tcx ingress link: %w", err)
	}
	if err := a.egress.Update(progs.Egress); err != nil {
		return nil, fmt.Errorf("update tcx egress link: %w", err)
	}
	return closers{pinnedLink{a.ingress}, pinnedLink{a.egress}}, nil
}

// detach unpins and closes the links, which detaches the programs.
func (a *adoptedLinks) detach() error {
	var errs []error
	for _, l := range []link.Link{a.ingress, a.egress} {
		if l != nil {
			errs = append(errs, pinnedLink{l}.Close())
		}
	}
	return errors.Join(errs...)
}

// pinnedLink detaches a pinned link: unpinned, then closed, its program
// goes.
type pinnedLink struct{ l link.Link }

func (p pinnedLink) Close() error {
	err := p.l.Unpin()
	return errors.Join(err, p.l.Close())
}

// removeOurFilters deletes the cls_bpf filters of ours (tc.go) on an
// interface: left by an agent that used the tc fallback, they would count
// every packet a second time beside this agent's programs.
func removeOurFilters(ifindex int) (int, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				continue // no clsact qdisc
			}
			return n, err
		}
		for _, f := range fs {
			if b, ok := f.(*netlink.BpfFilter); ok && isOurs(b) {
				if err := netlink.FilterDel(b); err != nil {
					return n, err
				}
				n++
			}
		}
	}
	return n, nil
}
