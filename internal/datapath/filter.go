package datapath

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

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
	skbData    = 76
	skbDataEnd = 80

	skbVlanPresent = 20
	skbVlanTCI     = 24
	skbVlanProto   = 28 // network order, as a 16-bit load: 0x88a8 reads 0xa888 here
	qinqProto      = 0xa888
)

// InstallCaptureFilter compiles f into the programs of both directions and
// puts them in the entry program's tail-call slots: from the next packet
// on, matching packets go to the filtered-packets buffer. The capture
// capability must be on. Call RemoveCaptureFilter to end it.
func (d *Datapath) InstallCaptureFilter(f *pcapfilter.Filter, o FilterOptions) error {
	if len(o.Ifindexes) > maxFilterIfaces {
		return fmt.Errorf("%d interfaces: a filtered capture takes at most %d", len(o.Ifindexes), maxFilterIfaces)
	}
	snap := o.Snaplen
	if snap == 0 || snap > CaptureMaxCaplen {
		snap = CaptureMaxCaplen
	}
	return d.installSlots(0, "the filter", func(dir uint32) (*ebpf.ProgramSpec, error) {
		spec, err := pcapfilter.Program(f, d.filterOutput(flow.Direction(dir), o.Ifindexes, snap))
		if err != nil {
			return nil, err
		}
		spec.Name = "loupe_filter"
		return spec, nil
	})
}

// installSlots loads the program build makes for each direction and puts
// them in the tail-call slots from first; what is named says what failed.
func (d *Datapath) installSlots(first uint32, what string, build func(dir uint32) (*ebpf.ProgramSpec, error)) error {
	if d.objs.CaptureFilterProgs == nil || !d.captureOn() {
		return errors.New("the capture capability is off in this agent")
	}
	var progs [2]*ebpf.Program
	defer func() {
		// The slots hold their own references.
		for _, p := range progs {
			if p != nil {
				p.Close()
			}
		}
	}()
	for dir := range progs {
		spec, err := build(uint32(dir))
		if err != nil {
			return err
		}
		if progs[dir], err = ebpf.NewProgram(spec); err != nil {
			return fmt.Errorf("load %s's program: %w", what, err)
		}
	}
	for dir, p := range progs {
		if err := d.objs.CaptureFilterProgs.Put(first+uint32(dir), p); err != nil {
			d.emptySlots(first)
			return fmt.Errorf("install %s: %w", what, err)
		}
	}
	return nil
}

// RemoveCaptureFilter empties the tail-call slots: the filtered capture
// stops at the next packet.
func (d *Datapath) RemoveCaptureFilter() error { return d.emptySlots(0) }

// emptySlots empties the two tail-call slots from first (one per
// direction).
func (d *Datapath) emptySlots(first uint32) error {
	if d.objs.CaptureFilterProgs == nil {
		return nil
	}
	var errs []error
	for dir := uint32(0); dir < 2; dir++ {
		if err := d.objs.CaptureFilterProgs.Delete(first + dir); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// OpenFilteredPackets opens a reader of the filtered capture's packets,
// decoded with DecodeCapturedPacket.
func (d *Datapath) OpenFilteredPackets(perCPUBytes int) (*perf.Reader, error) {
	r, err := newPacketReader(d.objs.CaptureFiltered, perCPUBytes)
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
		asm.StoreImm(asm.RFP, hdr+28, 0, asm.Word), // rule, vlan, vlan_tci
		// The tag in the skb's metadata (VLAN_OF in bpf/capture/keep.h).
		asm.LoadMem(asm.R1, asm.R6, skbVlanPresent, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "filter_flags"),
		asm.LoadMem(asm.R1, asm.R6, skbVlanTCI, asm.Word),
		asm.StoreMem(asm.RFP, hdr+30, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, asm.R6, skbVlanProto, asm.Word),
		asm.Mov.Imm(asm.R2, 1),
		asm.JNE.Imm(asm.R1, int32(qinqProto), "filter_vlan"),
		asm.Mov.Imm(asm.R2, 2),
		asm.StoreMem(asm.RFP, hdr+29, asm.R2, asm.Byte).WithSymbol("filter_vlan"),
		// flags = BPF_F_CURRENT_CPU | caplen << 32
		asm.LSh.Imm(asm.R3, 32).WithSymbol("filter_flags"),
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

// admitSlot is the first of the admission programs' tail-call slots
// (CAPTURE_ADMIT_SLOT in bpf/capture/filter.h).
const admitSlot = 2

// InstallAdmission builds the admission programs of both directions from
// the trigger rules' pcap filters (filters[i] for rule slot i; nil: the rule
// has none) and puts them in their tail-call slots. The capture function
// asks for them on a connection's first packet when a rule with a filter
// samples it (CaptureConfig.Filters); they run every filter on the packet,
// admit the connection to the rules whose filter matched, and go on to the
// on-demand filter.
func (d *Datapath) InstallAdmission(filters [MaxRules]*pcapfilter.Filter) error {
	return d.installSlots(admitSlot, "the trigger filters", func(dir uint32) (*ebpf.ProgramSpec, error) {
		insns, err := d.admissionInsns(filters, dir)
		if err != nil {
			return nil, err
		}
		return &ebpf.ProgramSpec{Name: "loupe_admit", Type: ebpf.SchedCLS, Instructions: insns, License: "Dual BSD/GPL"}, nil
	})
}

// RemoveAdmission empties the admission slots.
func (d *Datapath) RemoveAdmission() error { return d.emptySlots(admitSlot) }

// admissionInsns is the admission program: R9 collects the rules whose
// filter matched; the connection waiting in capture_admissions gets them
// in its admit mask, and its pending flag cleared; then the on-demand
// filter's slot of the direction.
func (d *Datapath) admissionInsns(filters [MaxRules]*pcapfilter.Filter, dir uint32) (asm.Instructions, error) {
	const (
		key = -pcapfilter.StackBytes - 8 // below the filters' stack
		out = "admit_out"
	)
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Imm(asm.R9, 0),
	}
	for i, f := range filters {
		if f == nil {
			continue
		}
		verdict, next := fmt.Sprintf("admit_v%d", i), fmt.Sprintf("admit_n%d", i)
		fi, err := f.Instructions(pcapfilter.Options{
			Ctx: asm.R6, PacketStart: asm.R7, PacketEnd: asm.R8, Result: asm.R0, ResultLabel: verdict,
			Working: [4]asm.Register{asm.R2, asm.R3, asm.R4, asm.R5}, LabelPrefix: fmt.Sprintf("admit%d", i),
		})
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		// The filter may have moved the packet pointers' registers'
		// contents: load them afresh for each.
		insns = append(insns,
			asm.LoadMem(asm.R7, asm.R6, skbData, asm.Word),
			asm.LoadMem(asm.R8, asm.R6, skbDataEnd, asm.Word),
		)
		insns = append(insns, fi...)
		insns = append(insns,
			asm.JEq.Imm(asm.R0, 0, next).WithSymbol(verdict),
			asm.Or.Imm(asm.R9, 1<<i),
			asm.Mov.Imm(asm.R0, 0).WithSymbol(next),
		)
	}
	var cs loupeConnState
	insns = append(insns,
		asm.StoreImm(asm.RFP, key, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, d.objs.CaptureAdmissions.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, out),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R8, asm.R7, int16(unsafe.Offsetof(loupeCaptureAdmission{}.Pending)), asm.Byte),
		asm.And.Reg(asm.R9, asm.R8),
		asm.LoadMapPtr(asm.R1, d.objs.CaptureConns.FD()),
		asm.Mov.Reg(asm.R2, asm.R7), // the connection key, first in the value
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, out),
		asm.LoadMem(asm.R1, asm.R0, int16(unsafe.Offsetof(cs.Admit)), asm.Byte),
		asm.Or.Reg(asm.R1, asm.R9),
		asm.StoreMem(asm.R0, int16(unsafe.Offsetof(cs.Admit)), asm.R1, asm.Byte),
		asm.LoadMem(asm.R1, asm.R0, int16(unsafe.Offsetof(cs.Flags)), asm.Byte),
		asm.And.Imm(asm.R1, ^int32(connFilterPending)),
		asm.StoreMem(asm.R0, int16(unsafe.Offsetof(cs.Flags)), asm.R1, asm.Byte),
		// On to the on-demand filter, if one runs.
		asm.Mov.Reg(asm.R1, asm.R6).WithSymbol(out),
		asm.LoadMapPtr(asm.R2, d.objs.CaptureFilterProgs.FD()),
		asm.Mov.Imm(asm.R3, int32(dir)),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, -1),
		asm.Return(),
	)
	return insns, nil
}

// connFilterPending is CONN_FILTER_PENDING (bpf/capture/conn.h).
const connFilterPending = 1 << 2
