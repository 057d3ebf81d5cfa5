package attach

import (
	"fmt"
	"io"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// tcxAttacher attaches through TCX links: each link is a file descriptor
// that detaches the program when closed (or when the process dies), so a
// crashed agent leaves nothing behind, unless the link is pinned (pinDir
// set, pins.go): then it outlives the agent, and the programs keep
// counting until the next agent adopts the link.
type tcxAttacher struct{ pinDir string }

func (tcxAttacher) mode() Mode { return TCX }

func (a tcxAttacher) attach(ifindex int, progs Programs, pos Position) (io.Closer, error) {
	anchor := link.Head()
	if pos == Tail {
		anchor = link.Tail()
	}
	var links closers
	for _, h := range []struct {
		prog *ebpf.Program
		typ  ebpf.AttachType
		name string
	}{
		{progs.Ingress, ebpf.AttachTCXIngress, "ingress"},
		{progs.Egress, ebpf.AttachTCXEgress, "egress"},
	} {
		l, err := link.AttachTCX(link.TCXOptions{
			Interface: ifindex,
			Program:   h.prog,
			Attach:    h.typ,
			Anchor:    anchor,
		})
		if err != nil {
			links.Close()
			return nil, fmt.Errorf("tcx %s: %w", h.name, err)
		}
		if a.pinDir == "" {
			links = append(links, l)
			continue
		}
		path := linkPin(a.pinDir, ifindex, h.name)
		os.Remove(path) // a pin of a link that is gone (its interface was deleted)
		if err := l.Pin(path); err != nil {
			l.Close()
			links.Close()
			return nil, fmt.Errorf("pin tcx %s link: %w", h.name, err)
		}
		links = append(links, pinnedLink{l})
	}
	return links, nil
}
