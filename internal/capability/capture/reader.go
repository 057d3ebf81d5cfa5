package capture

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
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
	conv := u.newConv()
	var o *orderedRead
	o = &orderedRead{
		rd: u.packets, clock: u.clock, log: u.log,
		maxBytes: int(u.cfg.BufferSize) * runtime.NumCPU(),
		done:     func() bool { return ctx.Err() != nil },
		emit: func(p *datapath.CapturedPacket) error {
			u.write(conv.pcapng(p), p.Kept)
			return nil
		},
		tick: func() error {
			u.stats.readerLost.Store(o.lost)
			u.stats.late.Store(o.late)
			u.tickFileClock()
			u.flush()
			return nil
		},
	}
	err := o.run()
	u.stats.readerLost.Store(o.lost)
	u.stats.late.Store(o.late)
	u.tickFileClock()
	u.flush()
	return err
}

// wallRefresh is how often, in the packets' own time, a packetConv reads
// the clocks again to turn monotonic times into wall times: the offset
// between the two moves only when the wall clock is set or slewed.
const wallRefresh = 100 * time.Millisecond

// packetConv turns one reader's captured packets into pcapng packets. What
// it keeps from one packet to the next spares each packet the clock
// readings and the formatting that were a large part of the reader's time
// per packet at high rates (a capture of small packets, section 8 of
// bench/RESULTS.md): the packets of a trace share their comment but for
// a request line.
type packetConv struct {
	u    *Unit
	out  pcapng.Packet
	vlan []byte // the frame with its VLAN tag put back
	// wallAt is the packet time the offset wallOff (wall minus
	// monotonic nanoseconds) was read at; 0: never.
	wallAt  uint64
	wallOff int64
	last    traceComment
	text    []byte
	// The last interface named, and the packet time it was looked up
	// at: packets come in runs from one interface, and the names'
	// table takes a lock.
	ifindex uint32
	ifname  string
	ifAt    uint64
	// Per rule slot, its newest holder as of a generation of the
	// unit's names (Unit.namedGen): every packet at or after the
	// holder's start is its, without the unit's lock.
	holders [datapath.MaxRules]struct {
		gen uint64
		h   slotHolder
		ok  bool
	}
}

// ifaceCache is how long, in packet time, a packetConv keeps an
// interface's name.
const ifaceCache = time.Second

// traceComment is a packet's comment but its request line, and what it is
// made of.
type traceComment struct {
	trace   uint32
	trigger string
	status  uint16
	kept    bool
	id      string // the trace id as text
	text    string
}

func (u *Unit) newConv() *packetConv { return &packetConv{u: u} }

// wall converts a CLOCK_MONOTONIC time of the datapath to Unix nanoseconds,
// as Unit.monoToWall does, reading the clocks at most every wallRefresh.
func (c *packetConv) wall(mono uint64) int64 {
	if c.wallAt == 0 || mono > c.wallAt+uint64(wallRefresh) {
		c.wallOff = c.u.clock.Now().UnixNano() - int64(c.u.clock.Mono())
		c.wallAt = max(mono, 1)
	}
	return int64(mono) + c.wallOff
}

// pcapng returns p as a pcapng packet, valid until the next call: its Data
// points into p's record, or into the converter when the packet's VLAN tag
// goes back into the frame.
func (c *packetConv) pcapng(p *datapath.CapturedPacket) *pcapng.Packet {
	u, out := c.u, &c.out
	dir := pcapng.Inbound
	if p.Direction == flow.Egress {
		dir = pcapng.Outbound
	}
	*out = pcapng.Packet{
		TimeNs:    c.wall(p.Time),
		Ifindex:   p.Ifindex,
		IfName:    c.ifaceName(p.Ifindex, p.Time),
		Direction: dir,
		OrigLen:   p.Len,
		Data:      p.Data,
	}
	if p.VLAN != 0 && len(p.Data) >= 12 {
		// The tag the kernel held apart, back after the MAC addresses,
		// where the wire (and tcpdump, through libpcap) has it.
		b := append(c.vlan[:0], p.Data[:12]...)
		b = append(b, byte(p.VLAN>>8), byte(p.VLAN), byte(p.VLANTCI>>8), byte(p.VLANTCI))
		b = append(b, p.Data[12:]...)
		c.vlan = b
		out.Data, out.OrigLen = b, p.Len+4
	}
	if p.Filtered {
		return out
	}
	// The trigger that held the rule's slot when the packet crossed the
	// hook; a kept packet crossed it before its trace began, perhaps
	// before its trigger was added: the holder now, just after the trace
	// began, is its trigger.
	at := p.Time
	if p.Kept {
		at = u.clock.Mono()
	}
	tc := c.comment(p.TraceID, c.slotName(p.Rule, at), p.Status, p.Kept)
	out.Comment = tc.text
	if line := requestLine(p.Data); line != "" {
		out.Comment = tc.text + " request=" + line
		u.recent.request(tc.id, line)
	}
	return out
}

// ifaceName is the unit's ifaceName, kept for ifaceCache of packet time.
func (c *packetConv) ifaceName(ifindex uint32, at uint64) string {
	if c.ifAt == 0 || ifindex != c.ifindex || at > c.ifAt+uint64(ifaceCache) || at < c.ifAt {
		c.ifindex, c.ifname, c.ifAt = ifindex, c.u.ifaceName(ifindex), max(at, 1)
	}
	return c.ifname
}

// slotName is the unit's slotName, from the slot's newest holder while
// the names have not changed.
func (c *packetConv) slotName(rule uint8, at uint64) string {
	if int(rule) >= len(c.holders) {
		return c.u.slotName(rule, at)
	}
	sc := &c.holders[rule]
	if gen := c.u.namedGen.Load(); sc.gen != gen {
		sc.h, sc.ok, sc.gen = c.u.newestHolder(rule)
	}
	if sc.ok && at >= sc.h.since {
		return sc.h.name
	}
	return c.u.slotName(rule, at)
}

// comment returns the comment of a trace's packets but the request line,
// made again only when it differs from the last packet's.
func (c *packetConv) comment(trace uint32, trigger string, status uint16, kept bool) *traceComment {
	l := &c.last
	if l.text != "" && l.trace == trace && l.trigger == trigger && l.status == status && l.kept == kept {
		return l
	}
	b := append(c.text[:0], "trace="...)
	b = appendHex8(b, trace)
	id := string(b[len("trace="):])
	b = append(b, " trigger="...)
	b = append(b, trigger...)
	if status != 0 {
		b = append(b, " status="...)
		b = strconv.AppendUint(b, uint64(status), 10)
	} else {
		b = append(b, " tcp.rst"...)
	}
	if kept {
		b = append(b, " kept-before-trigger"...)
	}
	c.text = b
	*l = traceComment{trace: trace, trigger: trigger, status: status, kept: kept, id: id, text: string(b)}
	return l
}

// appendHex8 appends v as eight lowercase hex digits, as %08x.
func appendHex8(b []byte, v uint32) []byte {
	const digits = "0123456789abcdef"
	for i := 28; i >= 0; i -= 4 {
		b = append(b, digits[v>>uint(i)&0xf])
	}
	return b
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
