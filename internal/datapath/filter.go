package datapath

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/perf"

	"loupe/internal/flow"
	"loupe/internal/pcapfilter"
)

// On-demand filtered capture (`loupe capture --filter`): a pcap filter
// compiled to eBPF (internal/pcapfilter) runs as a program of its own, which
// the entry program tail-calls after its capabilities, one slot per hook
// direction (capture_filter_progs, bpf/loupe.c). An empty slot costs a
// patched-out jump: nothing is attached or reloaded to start or end a
// capture, and no packet is parsed twice by the entry program's
// capabilities. The filter reads the frame itself, as tcpdump's does.

// FilterOptions say what a filtered capture takes besides its filter.
type FilterOptions struct {
	// Ifindexes limit the capture to these interfaces; empty: all.
	Ifindexes []uint32
	// Snaplen is the bytes captured of each packet (0: all, up to
	// CaptureMaxCaplen).
	Snaplen uint32
}

// CaptureMaxCaplen is the most bytes of a packet sent to userspace (a perf
// sample's size is 16 bits wide); longer ones are GSO/GRO super-packets.
const CaptureMaxCaplen = 65000

// maxFilterIfaces bounds the interface test the program makes per packet.
const maxFilterIfaces = 64

// FilteredPacketKind marks a packet of an on-demand capture
// (CapturedPacket.Kind).
const kindFiltered = 2

// skb field offsets (struct __sk_buff).
const (
	skbLen     = 0
	skbIfindex = 40
)

// InstallCaptureFilter compiles f into the programs of both directions and
// puts them in the entry program's tail-call slots: from the next packet
// on, matching packets go to the filtered-packets buffer. The capture
// capability must be on. Call RemoveCaptureFilter to end it.
func (d *Datapath) InstallCaptureFilter(f *pcapfilter.Filter, o FilterOptions) error {
	if d.objs.CaptureFilterProgs == nil || !d.captureOn() {
		return errors.New("the capture capability is off in this agent")
	}
	if len(o.Ifindexes) > maxFilterIfaces {
		return fmt.Errorf("%d interfaces: a filtered capture takes at most %d", len(o.Ifindexes), maxFilterIfaces)
	}
	snap := o.Snaplen
	if snap == 0 || snap > CaptureMaxCaplen {
		snap = CaptureMaxCaplen
	}
	var progs [2]*ebpf.Program
	defer func() {
		for _, p := range progs {
			if p != nil {
				p.Close()
			}
		}
	}()
	for dir := range progs {
		spec, err := pcapfilter.Program(f, d.filterOutput(flow.Direction(dir), o.Ifindexes, snap))
		if err != nil {
			return err
		}
		spec.Name = "loupe_filter"
		p, err := ebpf.NewProgram(spec)
		if err != nil {
			return fmt.Errorf("load the filter's program: %w", err)
		}
		progs[dir] = p
	}
	for dir, p := range progs {
		if err := d.objs.CaptureFilterProgs.Put(uint32(dir), p); err != nil {
			d.RemoveCaptureFilter()
			return fmt.Errorf("install the filter: %w", err)
		}
	}
	return nil
}

// RemoveCaptureFilter empties the tail-call slots: the filtered capture
// stops at the next packet.
func (d *Datapath) RemoveCaptureFilter() error {
	if d.objs.CaptureFilterProgs == nil {
		return nil
	}
	var errs []error
	for dir := uint32(0); dir < 2; dir++ {
		if err := d.objs.CaptureFilterProgs.Delete(dir); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// OpenFilteredPackets opens a reader of the filtered capture's packets,
// decoded with DecodeCapturedPacket.
func (d *Datapath) OpenFilteredPackets(perCPUBytes int) (*perf.Reader, error) {
	r, err := perf.NewReader(d.objs.CaptureFiltered, perCPUBytes)
	if err != nil {
		return nil, fmt.Errorf("open filtered packets: %w", err)
	}
	return r, nil
}

// filterOutput is what the filter's program runs on a match (R6 = skb):
// skip other interfaces, then send the packet with a struct capture_pkt
// header to the filtered-packets buffer.
func (d *Datapath) filterOutput(dir flow.Direction, ifindexes []uint32, snap uint32) asm.Instructions {
	const (
		hdr  = -32 // struct capture_pkt on the stack
		send = "filter_send"
	)
	var insns asm.Instructions
	if len(ifindexes) > 0 {
		insns = append(insns, asm.LoadMem(asm.R1, asm.R6, skbIfindex, asm.Word))
		for _, ix := range ifindexes {
			insns = append(insns, asm.JEq.Imm(asm.R1, int32(ix), send))
		}
		insns = append(insns, asm.Ja.Label(pcapfilter.ExitLabel))
	}
	insns = append(insns,
		asm.FnKtimeGetNs.Call().WithSymbol(send),
		asm.StoreMem(asm.RFP, hdr, asm.R0, asm.DWord),
		asm.LoadMem(asm.R1, asm.R6, skbIfindex, asm.Word),
		asm.StoreMem(asm.RFP, hdr+8, asm.R1, asm.Word),
		asm.LoadMem(asm.R2, asm.R6, skbLen, asm.Word),
		asm.StoreMem(asm.RFP, hdr+12, asm.R2, asm.Word),
		// caplen = min(len, snap)
		asm.Mov.Reg(asm.R3, asm.R2),
		asm.JLE.Imm(asm.R3, int32(snap), "filter_caplen"),
		asm.Mov.Imm(asm.R3, int32(snap)),
		asm.StoreMem(asm.RFP, hdr+16, asm.R3, asm.Word).WithSymbol("filter_caplen"),
		asm.StoreImm(asm.RFP, hdr+20, 0, asm.Word), // trace_id
		asm.StoreImm(asm.RFP, hdr+24, 0, asm.Half), // status
		asm.StoreImm(asm.RFP, hdr+26, int64(dir), asm.Byte),
		asm.StoreImm(asm.RFP, hdr+27, kindFiltered, asm.Byte),
		asm.StoreImm(asm.RFP, hdr+28, 0, asm.Word), // rule, pad
		// flags = BPF_F_CURRENT_CPU | caplen << 32
		asm.LSh.Imm(asm.R3, 32),
		asm.LoadImm(asm.R4, 0xffffffff, asm.DWord),
		asm.Or.Reg(asm.R3, asm.R4),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, d.objs.CaptureFiltered.FD()),
		asm.Mov.Reg(asm.R4, asm.RFP),
		asm.Add.Imm(asm.R4, hdr),
		asm.Mov.Imm(asm.R5, capturePktHeader),
		asm.FnPerfEventOutput.Call(),
	)
	return insns
}

func (d *Datapath) captureOn() bool { return slices.Contains(d.opts.Capabilities, "capture") }
