package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
	"loupe/internal/tunnel"
)

// The outer side of tunnelled flows. The parse takes a packet out of its
// tunnel and keys it by the inner packet; the outer side goes to a tunnel
// table beside each flow table (tunnels_a, tunnels_b in bpf/flows/flows.h),
// written with a flow's first packet of the interval, and drained and
// cleared with the flow table.

// TunnelDrain is implemented by the drains whose flow table has a tunnel
// table beside it: those Rotate returns, and the standby table of an
// adopted pin set among Leftovers. A retired pin set's tables have none.
type TunnelDrain interface {
	// Tunnels returns the outer side of every flow of the drained table
	// that the hook saw inside a tunnel, by its flow key (the key Read
	// hands out). Call it after Read and before Clear, which empties the
	// tunnel table with the flow table.
	Tunnels() (map[flow.Key]tunnel.Info, error)
}

// Tunnels returns the outer side of the tunnelled flows of d (see
// TunnelDrain), or nil when d has no tunnel table.
func Tunnels(d flow.Drain) (map[flow.Key]tunnel.Info, error) {
	if td, ok := d.(TunnelDrain); ok {
		return td.Tunnels()
	}
	return nil, nil
}

// tunnelTable returns the tunnel table beside flow table idx.
func (d *Datapath) tunnelTable(idx uint32) *ebpf.Map {
	if idx&1 == 0 {
		return d.objs.TunnelsA
	}
	return d.objs.TunnelsB
}

// Tunnels reads the tunnel table beside the drained flow table.
func (t *tableDrain) Tunnels() (map[flow.Key]tunnel.Info, error) {
	m := t.d.tunnelTable(t.idx)
	out := make(map[flow.Key]tunnel.Info)
	keys := make([]loupeFlowKey, drainBatch)
	vals := make([]loupeTunnelInfo, drainBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			var k flow.Key
			keyFromBPF(&k, &keys[i])
			out[k] = tunnelFromBPF(&vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read tunnel table: %w", err)
		}
	}
	// Kernels without batch operations.
	var (
		bk loupeFlowKey
		bv loupeTunnelInfo
	)
	iter := m.Iterate()
	for iter.Next(&bk, &bv) {
		var k flow.Key
		keyFromBPF(&k, &bk)
		out[k] = tunnelFromBPF(&bv)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("iterate tunnel table: %w", err)
	}
	return out, nil
}

// clearTunnels empties the tunnel table beside flow table idx.
func (d *Datapath) clearTunnels(idx uint32) error {
	m := d.tunnelTable(idx)
	keys := make([]loupeFlowKey, drainBatch)
	vals := make([]loupeTunnelInfo, drainBatch)
	var cursor ebpf.MapBatchCursor
	for {
		_, err := m.BatchLookupAndDelete(&cursor, keys, vals, nil)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return clearByIteration(m)
		}
		if err != nil {
			return fmt.Errorf("clear tunnel table: %w", err)
		}
	}
}

func tunnelFromBPF(b *loupeTunnelInfo) tunnel.Info {
	return tunnel.Info{
		Type:          tunnel.Type(b.Type),
		ID:            b.Id,
		HasID:         b.Flags&uint8(loupeTunnelFlagTUNNEL_F_ID) != 0,
		SrcAddr:       netip.AddrFrom16(b.SrcAddr).Unmap(),
		DstAddr:       netip.AddrFrom16(b.DstAddr).Unmap(),
		SrcPort:       b.SrcPort,
		DstPort:       b.DstPort,
		SrcMAC:        b.SrcMac,
		DstMAC:        b.DstMac,
		VlanID:        b.VlanId,
		InnerEthernet: b.Flags&uint8(loupeTunnelFlagTUNNEL_F_ETH) != 0,
	}
}
