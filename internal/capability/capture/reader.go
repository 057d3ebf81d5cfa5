package capture

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"loupe/internal/datapath"
	"loupe/internal/flow"
	"loupe/internal/pcapng"
)

// traceInfo is what the unit remembers of the last trace, for the status
// and the log.
type traceInfo struct {
	ID      uint32
	Trigger string
	Status  uint16
	Time    time.Time
}

// readEvents logs every trace the kernel starts.
func (u *Unit) readEvents(ctx context.Context) {
	for {
		u.events.SetDeadline(time.Now().Add(readWake))
		rec, err := u.events.Read()
		switch {
		case isDeadline(err):
			if ctx.Err() != nil {
				return
			}
			continue
		case errors.Is(err, ringbuf.ErrClosed):
			return
		case err != nil:
			u.log.Error("reading trace events", "err", err)
			return
		}
		ev, err := datapath.DecodeCaptureEvent(rec.RawSample)
		if err != nil {
			u.log.Error("decoding a trace event", "err", err)
			continue
		}
		u.stats.traces.Add(1)
		name := u.slotName(ev.Rule, ev.Time)
		u.stats.lastTrace.Store(traceInfo{ID: ev.TraceID, Trigger: name, Status: ev.Status, Time: time.Unix(0, u.monoToWall(ev.Time))})
		k := ev.Key
		u.recent.add(Trace{ID: fmt.Sprintf("%08x", ev.TraceID), Trigger: name, Status: ev.Status, Time: time.Unix(0, u.monoToWall(ev.Time)).UTC(),
			Src: netip.AddrPortFrom(k.SrcIP(), k.SrcPort).String(), Dst: netip.AddrPortFrom(k.DstIP(), k.DstPort).String(), Iface: u.ifaceName(k.IfIndex)})
		u.log.Info("trace started", "trace", fmt.Sprintf("%08x", ev.TraceID), "trigger", name, "status", ev.Status,
			"src", netip.AddrPortFrom(k.SrcIP(), k.SrcPort).String(), "dst", netip.AddrPortFrom(k.DstIP(), k.DstPort).String(),
			"iface", u.ifaceName(k.IfIndex), "kept_packets", ev.Kept, "split_status_line", ev.Split)
	}
}

// readPackets writes every captured packet, in time order, until ctx is
// done, then what the perf buffers still hold.
func (u *Unit) readPackets(ctx context.Context) error {
	var (
		out     pcapng.Packet
		vlanBuf []byte
	)
	var o *orderedRead
	o = &orderedRead{
		rd: u.packets, clock: u.clock, log: u.log,
		maxBytes: int(u.cfg.BufferSize) * runtime.NumCPU(),
		done:     func() bool { return ctx.Err() != nil },
		emit: func(p *datapath.CapturedPacket) error {
			u.toPcapng(p, &out, &vlanBuf)
			u.write(&out, p.Kept)
			return nil
		},
		tick: func() error {
			u.stats.readerLost.Store(o.lost)
			u.stats.late.Store(o.late)
			u.flush()
			return nil
		},
	}
	err := o.run()
	u.stats.readerLost.Store(o.lost)
	u.stats.late.Store(o.late)
	u.flush()
	return err
}

// toPcapng fills out from p; out.Data points into p's record, or into buf
// when the packet's VLAN tag goes back into the frame.
func (u *Unit) toPcapng(p *datapath.CapturedPacket, out *pcapng.Packet, buf *[]byte) {
	dir := pcapng.Inbound
	if p.Direction == flow.Egress {
		dir = pcapng.Outbound
	}
	*out = pcapng.Packet{
		TimeNs:    u.monoToWall(p.Time),
		Ifindex:   p.Ifindex,
		IfName:    u.ifaceName(p.Ifindex),
		Direction: dir,
		OrigLen:   p.Len,
		Data:      p.Data,
	}
	if p.VLAN != 0 && len(p.Data) >= 12 {
		// The tag the kernel held apart, back after the MAC addresses,
		// where the wire (and tcpdump, through libpcap) has it.
		b := append((*buf)[:0], p.Data[:12]...)
		b = append(b, byte(p.VLAN>>8), byte(p.VLAN), byte(p.VLANTCI>>8), byte(p.VLANTCI))
		b = append(b, p.Data[12:]...)
		*buf = b
		out.Data, out.OrigLen = b, p.Len+4
	}
	if p.Filtered {
		return
	}
	// The trigger that held the rule's slot when the packet crossed the
	// hook; a kept packet crossed it before its trace began, perhaps
	// before its trigger was added: the holder now, just after the trace
	// began, is its trigger.
	at := p.Time
	if p.Kept {
		at = u.clock.Mono()
	}
	var c strings.Builder
	fmt.Fprintf(&c, "trace=%08x trigger=%s", p.TraceID, u.slotName(p.Rule, at))
	if p.Status != 0 {
		fmt.Fprintf(&c, " status=%d", p.Status)
	} else {
		c.WriteString(" tcp.rst")
	}
	if p.Kept {
		c.WriteString(" kept-before-trigger")
	}
	if line := requestLine(p.Data); line != "" {
		c.WriteString(" request=")
		c.WriteString(line)
		u.recent.request(fmt.Sprintf("%08x", p.TraceID), line)
	}
	out.Comment = c.String()
}

// write sends one packet to the files and the followers.
func (u *Unit) write(p *pcapng.Packet, kept bool) {
	u.stats.packets.Add(1)
	u.stats.bytes.Add(uint64(p.OrigLen))
	if kept {
		u.stats.kept.Add(1)
	}
	if u.series != nil {
		if err := u.series.WritePacket(p); err != nil {
			u.stats.writeErrors.Add(1)
			u.log.Error("writing a captured packet", "err", err)
		}
	}
	u.follow.send(p)
}

func (u *Unit) flush() {
	if u.series != nil {
		if err := u.series.Flush(); err != nil {
			u.stats.writeErrors.Add(1)
			u.log.Error("flushing the capture file", "err", err)
		}
	}
}
