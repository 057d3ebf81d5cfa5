package e2e

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"loupe/internal/datapath"
	"loupe/internal/testutil"
)

// TestCoexistsWithOtherPrograms: a program someone else attached (think of a
// CNI's) stays attached and keeps running; with TCX ours goes first, so the
// other cannot hide packets from us; stopping the agent removes only ours.
func TestCoexistsWithOtherPrograms(t *testing.T) {
	t.Run("tcx", func(t *testing.T) {
		p := newPair(t)
		foreign, err := datapath.LoadBaseline()
		if err != nil {
			t.Fatal(err)
		}
		defer foreign.Close()
		ifindex := ifindexIn(t, p.a, p.vethA)
		var l link.Link
		if err := p.a.Do(func() (err error) {
			l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: foreign, Attach: ebpf.AttachTCXIngress})
			return err
		}); err != nil {
			t.Fatalf("attach foreign program: %v", err)
		}
		defer l.Close()
		foreignInfo, _ := foreign.Info()
		foreignID, _ := foreignInfo.ID()

		a := startAgent(t, p.a, agentOpts{})
		a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
		progs := tcxPrograms(t, p.a, ifindex)
		if len(progs) != 2 || progs[1] != foreignID {
			t.Fatalf("ingress chain %v, want [loupe, foreign %d]", progs, foreignID)
		}
		// loupe_ingress, or loupe_flows_ingress when flows is the only
		// capability (the kernel cuts names to 15 bytes).
		if name := programName(t, progs[0]); !strings.HasPrefix(name, "loupe_") || !strings.Contains(name, "ingr") {
			t.Fatalf("head of the chain is %q, want loupe's ingress entry program", name)
		}
		p.up(t)
		ping(t, p.b, p.a4, 2, 56) // packets still flow through both programs
		a.stop()
		if progs := tcxPrograms(t, p.a, ifindex); len(progs) != 1 || progs[0] != foreignID {
			t.Fatalf("after stop: ingress chain %v, want only the foreign program %d", progs, foreignID)
		}
	})

	t.Run("tc", func(t *testing.T) {
		p := newPair(t)
		// A foreign cls_bpf filter, added with tc(8) from an object file.
		p.a.Run(t, "tc", "qdisc", "add", "dev", p.vethA, "clsact")
		p.a.Run(t, "tc", "filter", "add", "dev", p.vethA, "ingress", "prio", "1", "handle", "7", "bpf", "da",
			"obj", "../../internal/datapath/baseline_bpfel.o", "sec", "tc")
		a := startAgent(t, p.a, agentOpts{args: []string{"--attach-mode", "tc"}})
		a.waitLog(5*time.Second, "msg=attached", "iface="+p.vethA+" ")
		filters := p.a.Run(t, "tc", "filter", "show", "dev", p.vethA, "ingress")
		if !strings.Contains(filters, "handle 0x7") || !strings.Contains(filters, "loupe_flows") {
			t.Fatalf("ingress filters:\n%s\nwant the foreign one (handle 0x7) and loupe_flows", filters)
		}
		p.up(t)
		ping(t, p.b, p.a4, 2, 56)
		a.stop()
		filters = p.a.Run(t, "tc", "filter", "show", "dev", p.vethA, "ingress")
		if !strings.Contains(filters, "handle 0x7") || strings.Contains(filters, "loupe_flows") {
			t.Fatalf("after stop, ingress filters:\n%s\nwant only the foreign one", filters)
		}
		if q := p.a.Run(t, "tc", "qdisc", "show", "dev", p.vethA); !strings.Contains(q, "clsact") {
			t.Fatalf("clsact qdisc removed: %s", q)
		}
	})
}

func ifindexIn(t *testing.T, ns *testutil.NS, name string) int {
	t.Helper()
	var idx int
	if err := ns.Do(func() error {
		i, err := net.InterfaceByName(name)
		if err == nil {
			idx = i.Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return idx
}

func tcxPrograms(t *testing.T, ns *testutil.NS, ifindex int) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	if err := ns.Do(func() error {
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		for _, p := range res.Programs {
			ids = append(ids, p.ID)
		}
		return nil
	}); err != nil {
		t.Fatalf("query tcx programs: %v", err)
	}
	return ids
}

func programName(t *testing.T, id ebpf.ProgramID) string {
	t.Helper()
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info.Name
}
