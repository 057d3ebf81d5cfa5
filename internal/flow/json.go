package flow

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// TimeLayout is RFC 3339 with nanoseconds, always nine digits, in UTC.
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// AppendJSON appends r as one JSON object (no trailing newline). It is the
// one JSON form of a flow: the JSON sink writes it and `loupe flows --json`
// prints it. It is hand-written because a sink encodes every record.
func AppendJSON(b []byte, r *Record) []byte {
	b = append(b, `{"iface":`...)
	b = strconv.AppendQuote(b, r.Iface)
	b = append(b, `,"ifindex":`...)
	b = strconv.AppendUint(b, uint64(r.IfIndex), 10)
	b = append(b, `,"direction":"`...)
	b = append(b, r.Direction.String()...)
	b = append(b, `","eth_type":`...)
	b = strconv.AppendUint(b, uint64(r.EtherType), 10)
	b = append(b, `,"src_mac":"`...)
	b = append(b, net.HardwareAddr(r.SrcMAC[:]).String()...)
	b = append(b, `","dst_mac":"`...)
	b = append(b, net.HardwareAddr(r.DstMAC[:]).String()...)
	b = append(b, `","proto":`...)
	b = strconv.AppendUint(b, uint64(r.Proto), 10)
	b = append(b, `,"src_addr":`...)
	b = appendAddr(b, r.SrcIP())
	b = append(b, `,"dst_addr":`...)
	b = appendAddr(b, r.DstIP())
	b = append(b, `,"src_port":`...)
	b = strconv.AppendUint(b, uint64(r.SrcPort), 10)
	b = append(b, `,"dst_port":`...)
	b = strconv.AppendUint(b, uint64(r.DstPort), 10)
	b = append(b, `,"packets":`...)
	b = strconv.AppendUint(b, r.Packets, 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendUint(b, r.Bytes, 10)
	b = append(b, `,"tcp_flags":`...)
	b = strconv.AppendUint(b, uint64(r.TCPFlags), 10)
	b = append(b, `,"dscp":`...)
	b = strconv.AppendUint(b, uint64(r.DSCP), 10)
	b = append(b, `,"sampling":`...)
	b = strconv.AppendUint(b, uint64(r.Sampling), 10)
	b = append(b, `,"first_seen":"`...)
	b = r.FirstSeen.UTC().AppendFormat(b, TimeLayout)
	b = append(b, `","last_seen":"`...)
	b = r.LastSeen.UTC().AppendFormat(b, TimeLayout)
	b = append(b, `"}`...)
	return b
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, `""`...)
	}
	b = append(b, '"')
	b = a.AppendTo(b)
	return append(b, '"')
}

// jsonRecord is the decoding side of AppendJSON, for tools and tests.
type jsonRecord struct {
	Iface     string `json:"iface"`
	IfIndex   uint32 `json:"ifindex"`
	Direction string `json:"direction"`
	EtherType uint16 `json:"eth_type"`
	SrcMAC    string `json:"src_mac"`
	DstMAC    string `json:"dst_mac"`
	Proto     uint8  `json:"proto"`
	SrcAddr   string `json:"src_addr"`
	DstAddr   string `json:"dst_addr"`
	SrcPort   uint16 `json:"src_port"`
	DstPort   uint16 `json:"dst_port"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
	TCPFlags  uint16 `json:"tcp_flags"`
	DSCP      uint8  `json:"dscp"`
	Sampling  uint32 `json:"sampling"`
	FirstSeen string `json:"first_seen"`
	LastSeen  string `json:"last_seen"`
}

// UnmarshalJSON decodes the form AppendJSON writes.
func (r *Record) UnmarshalJSON(data []byte) error {
	var j jsonRecord
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	dir, err := ParseDirection(j.Direction)
	if err != nil {
		return err
	}
	*r = Record{
		Iface:    j.Iface,
		Packets:  j.Packets,
		Bytes:    j.Bytes,
		TCPFlags: j.TCPFlags,
		DSCP:     j.DSCP,
		Sampling: j.Sampling,
	}
	r.IfIndex, r.Direction, r.EtherType, r.Proto = j.IfIndex, dir, j.EtherType, j.Proto
	r.SrcPort, r.DstPort = j.SrcPort, j.DstPort
	for _, m := range []struct {
		s   string
		dst *[6]byte
	}{{j.SrcMAC, &r.SrcMAC}, {j.DstMAC, &r.DstMAC}} {
		hw, err := net.ParseMAC(m.s)
		if err != nil || len(hw) != 6 {
			return fmt.Errorf("bad mac %q", m.s)
		}
		copy(m.dst[:], hw)
	}
	for _, a := range []struct {
		s   string
		dst *[16]byte
	}{{j.SrcAddr, &r.SrcAddr}, {j.DstAddr, &r.DstAddr}} {
		if a.s == "" {
			continue
		}
		ip, err := netip.ParseAddr(a.s)
		if err != nil {
			return fmt.Errorf("bad address: %w", err)
		}
		*a.dst = ip.As16()
	}
	if r.FirstSeen, err = time.Parse(time.RFC3339Nano, j.FirstSeen); err != nil {
		return fmt.Errorf("first_seen: %w", err)
	}
	if r.LastSeen, err = time.Parse(time.RFC3339Nano, j.LastSeen); err != nil {
		return fmt.Errorf("last_seen: %w", err)
	}
	return nil
}
