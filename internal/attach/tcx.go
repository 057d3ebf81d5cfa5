package attach

import (
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// tcxAttacher attaches through TCX links: each link is a file descriptor
// that detaches the program when closed (or when the process dies), so a
// crashed agent leaves nothing behind.
type tcxAttacher struct{}

func (tcxAttacher) mode() Mode { return TCX }

func (tcxAttacher) attach(ifindex int, progs Programs, pos Position) (io.Closer, error) {
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
		links = append(links, l)
	}
	return links, nil
}
