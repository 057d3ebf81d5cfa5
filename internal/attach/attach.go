// Package attach puts the flow programs on network interfaces and keeps
// them there as interfaces come and go.
//
// Two mechanisms hide behind one interface: TCX links (Linux 6.6+), which
// are owned by a file descriptor, ordered explicitly, and never disturb other
// programs; and, where TCX is missing, a clsact qdisc with a cls_bpf filter.
// Neither replaces nor removes anything another tool attached.
package attach

import (
	"fmt"
	"io"

	"github.com/cilium/ebpf"
)

// Mode selects the attach mechanism.
type Mode int

const (
	// Auto uses TCX where the kernel has it and falls back to TC.
	Auto Mode = iota
	// TCX uses TCX links only.
	TCX
	// TC uses a clsact qdisc and cls_bpf filters only.
	TC
)

func (m Mode) String() string {
	switch m {
	case TCX:
		return "tcx"
	case TC:
		return "tc"
	}
	return "auto"
}

// ParseMode parses "auto", "tcx" or "tc".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto", "":
		return Auto, nil
	case "tcx":
		return TCX, nil
	case "tc":
		return TC, nil
	}
	return Auto, fmt.Errorf("unknown attach mode %q (want auto, tcx or tc)", s)
}

// Position is where in the hook's chain our program goes.
type Position int

const (
	// Head runs before every other program, so that a CNI's redirecting
	// program cannot hide packets from us. We always return "next", so the
	// others still run.
	Head Position = iota
	// Tail runs after the others (and sees only what they let through).
	Tail
)

// ParsePosition parses "head" or "tail".
func ParsePosition(s string) (Position, error) {
	switch s {
	case "head", "":
		return Head, nil
	case "tail":
		return Tail, nil
	}
	return Head, fmt.Errorf("unknown attach position %q (want head or tail)", s)
}

// Programs are what gets attached to each interface.
type Programs struct {
	Ingress *ebpf.Program
	Egress  *ebpf.Program
}

// attacher attaches the programs to one interface, both directions, and
// returns what detaches them again.
type attacher interface {
	attach(ifindex int, progs Programs, pos Position) (io.Closer, error)
	mode() Mode
}

type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
