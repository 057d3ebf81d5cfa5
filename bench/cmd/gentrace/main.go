// Command gentrace writes the synthetic pcap traces the benchmarks replay
// with tcpreplay. Every trace is a pure function of its flags (the seed
// included), so two runs write identical files.
//
// Addresses are in 198.18.0.0/15, the range RFC 2544 sets aside for
// benchmarks, and the MACs are locally administered ones that no interface
// here has: the receiving veth drops the frames after its TC hook saw them.
//
//	gentrace -kind udp64 -flows 10000 -packets 10000 -out f.pcap
//	    64-byte UDP frames; packet i belongs to flow i mod flows.
//	gentrace -kind mixed -flows 5000 -packets 100000 -out f.pcap
//	    UDP and TCP flows, 64..128-byte frames, packets of all flows
//	    interleaved at random; every flow gets at least one packet.
//	gentrace -kind distinct -flows 100000 -out f.pcap
//	    one 64..128-byte packet per flow, every flow distinct.
//	gentrace -kind zipf -flows 2550 -packets 1000000 -truth t.tsv -out f.pcap
//	    UDP and TCP flows whose sizes follow a Zipf law (exponent 1.1):
//	    a few heavy hitters and a long tail, every flow at least one
//	    packet, packets interleaved at random. -truth writes each flow's
//	    packets and bytes (any kind but http500).
//	gentrace -kind http500 -packets 10000 -min 128 -out f.pcap
//	    one TCP connection, server to client: an HTTP/1.1 500 response
//	    header in the first packet, then -packets - 1 data segments of
//	    -min bytes each (the body it streams), in sequence. Replayed, the
//	    capture capability's default trigger fires on the first packet
//	    and every later one belongs to the trace.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

var (
	srcMAC = net.HardwareAddr{0x02, 0x4c, 0x42, 0x00, 0x00, 0x01}
	dstMAC = net.HardwareAddr{0x02, 0x4c, 0x42, 0x00, 0x00, 0x02}
)

// flowSpec is one flow of a trace: the 5-tuple, and for TCP how far along
// the connection is.
type flowSpec struct {
	src, dst         net.IP
	sport, dport     uint16
	tcp              bool
	sent, total, seq uint32
}

func main() {
	kind := flag.String("kind", "mixed", "trace kind: udp64, mixed, distinct, zipf or http500")
	truth := flag.String("truth", "", "file to write each flow's packets and bytes to, tab-separated (not http500)")
	flows := flag.Int("flows", 5000, "number of distinct flows")
	packets := flag.Int("packets", 100000, "number of packets (distinct: ignored, one per flow)")
	minLen := flag.Int("min", 64, "smallest frame, bytes (mixed, distinct)")
	maxLen := flag.Int("max", 128, "largest frame, bytes (mixed, distinct)")
	seed := flag.Uint64("seed", 1, "random seed")
	out := flag.String("out", "", "pcap file to write")
	flag.Parse()
	log.SetFlags(0)
	if *kind == "http500" {
		// -min alone sets the data frames' length.
		if *out == "" || *minLen < 64 || *minLen > 1514 {
			log.Fatal("gentrace: http500 needs -out and 64 <= -min <= 1514")
		}
		if err := writeHTTP500(*out, *packets, *minLen); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d packets, 1 connection, http500, %d-byte data frames\n", *out, *packets, *minLen)
		return
	}
	if *out == "" || *flows < 1 || *flows > 1<<22 || *minLen < 64 || *maxLen < *minLen || *maxLen > 1514 {
		log.Fatal("gentrace: need -out, 1 <= -flows <= 4194304 and 64 <= -min <= -max <= 1514")
	}
	rng := rand.New(rand.NewPCG(*seed, 0x6c6f757065))

	specs := make([]flowSpec, *flows)
	for i := range specs {
		specs[i] = newFlow(i, *kind != "udp64" && rng.IntN(2) == 0, rng)
	}

	var order []int // flow index of each packet
	switch *kind {
	case "udp64":
		*minLen, *maxLen = 64, 64
		for i := range *packets {
			order = append(order, i%*flows)
		}
	case "distinct":
		for i := range *flows {
			order = append(order, i)
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	case "zipf":
		if *packets < *flows {
			log.Fatal("gentrace: zipf needs -packets >= -flows")
		}
		// Flow i gets a share proportional to 1/(i+1)^1.1 of what is
		// left once every flow has its one packet.
		var norm float64
		for i := range *flows {
			norm += math.Pow(float64(i+1), -1.1)
		}
		extra := *packets - *flows
		for i := range *flows {
			n := 1 + int(float64(extra)*math.Pow(float64(i+1), -1.1)/norm)
			for range n {
				order = append(order, i)
			}
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	case "mixed":
		if *packets < *flows {
			log.Fatal("gentrace: mixed needs -packets >= -flows")
		}
		// One packet per flow, then the rest spread at random: flows
		// get unequal sizes, as real traffic has.
		for i := range *flows {
			order = append(order, i)
		}
		for len(order) < *packets {
			order = append(order, rng.IntN(*flows))
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	default:
		log.Fatalf("gentrace: unknown -kind %q", *kind)
	}
	for _, f := range order {
		specs[f].total++
	}

	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	writeFileHeader(bw)
	ts := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	buf := gopacket.NewSerializeBuffer()
	bytesOf := make([]uint64, len(specs))
	for _, fi := range order {
		length := *minLen
		if *maxLen > *minLen {
			length += rng.IntN(*maxLen - *minLen + 1)
		}
		frame, err := build(buf, &specs[fi], length)
		if err != nil {
			log.Fatal(err)
		}
		writePacket(bw, ts, frame)
		bytesOf[fi] += uint64(len(frame))
		ts = ts.Add(10 * time.Microsecond)
	}
	if err := bw.Flush(); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	if *truth != "" {
		if err := writeTruth(*truth, specs, bytesOf); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("%s: %d packets, %d flows, %d hosts, %s, %d..%d bytes, seed %d\n", *out, len(order), *flows, hosts(specs), *kind, *minLen, *maxLen, *seed)
}

// writeTruth writes one line per flow: src dst proto sport dport packets
// bytes, tab-separated, the protocol by number.
func writeTruth(path string, specs []flowSpec, bytesOf []uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	for i, s := range specs {
		proto := 17
		if s.tcp {
			proto = 6
		}
		fmt.Fprintf(bw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", s.src, s.dst, proto, s.sport, s.dport, s.total, bytesOf[i])
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// hosts counts the distinct addresses of a trace.
func hosts(specs []flowSpec) int {
	seen := make(map[string]bool)
	for _, s := range specs {
		seen[string(s.src)] = true
		seen[string(s.dst)] = true
	}
	return len(seen)
}

// newFlow gives flow i a unique 5-tuple: its index is spread over the
// source address (198.18.0.0/16) and source port, so any number of flows up
// to 4M stay distinct whatever the random parts.
func newFlow(i int, tcp bool, rng *rand.Rand) flowSpec {
	host := i / 64 // 64 source ports per source address
	src := net.IPv4(198, 18, byte(host>>8), byte(host))
	dst := net.IPv4(198, 19, byte(rng.IntN(4)), byte(1+rng.IntN(254)))
	dports := []uint16{53, 80, 123, 443, 5201, 8080}
	return flowSpec{
		src: src, dst: dst,
		sport: uint16(10000 + i%64*800 + rng.IntN(800)),
		dport: dports[rng.IntN(len(dports))],
		tcp:   tcp,
		seq:   rng.Uint32(),
	}
}

// build serialises the next packet of flow s as an Ethernet frame of exactly
// length bytes.
func build(buf gopacket.SerializeBuffer, s *flowSpec, length int) ([]byte, error) {
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, SrcIP: s.src, DstIP: s.dst, Id: uint16(s.sent)}
	var l4 gopacket.SerializableLayer
	hdr := 14 + 20
	if s.tcp {
		ip.Protocol = layers.IPProtocolTCP
		t := &layers.TCP{SrcPort: layers.TCPPort(s.sport), DstPort: layers.TCPPort(s.dport), Seq: s.seq, Window: 65535}
		switch {
		case s.sent == 0:
			t.SYN = true
		case s.sent == s.total-1:
			t.FIN, t.ACK = true, true
		default:
			t.ACK, t.PSH = true, true
		}
		if err := t.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		l4 = t
		hdr += 20
	} else {
		ip.Protocol = layers.IPProtocolUDP
		u := &layers.UDP{SrcPort: layers.UDPPort(s.sport), DstPort: layers.UDPPort(s.dport)}
		if err := u.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		l4 = u
		hdr += 8
	}
	payload := make([]byte, length-hdr)
	for i := range payload {
		payload[i] = byte(s.sent + uint32(i))
	}
	s.seq += uint32(len(payload))
	s.sent++
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, l4, gopacket.Payload(payload)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// http500Header is the first packet's payload: a status line the capture
// capability's default trigger (http.status=500-599) fires on, and a body
// long enough for every data segment after it.
const http500Header = "HTTP/1.1 500 Internal Server Error\r\n" +
	"Content-Type: application/octet-stream\r\n" +
	"Content-Length: 1000000000\r\n\r\n"

// writeHTTP500 writes the http500 trace: one connection from
// 198.18.1.1:80 to 198.19.1.1:40000, its response header, then packets - 1
// data segments of frames of length bytes.
func writeHTTP500(out string, packets, length int) error {
	if packets < 2 {
		return fmt.Errorf("http500 needs -packets >= 2")
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	writeFileHeader(bw)
	ts := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	buf := gopacket.NewSerializeBuffer()
	seq := uint32(1000)
	for i := range packets {
		eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, Id: uint16(i),
			SrcIP: net.IPv4(198, 18, 1, 1), DstIP: net.IPv4(198, 19, 1, 1)}
		t := &layers.TCP{SrcPort: 80, DstPort: 40000, Seq: seq, Ack: 1, ACK: true, PSH: true, Window: 65535}
		if err := t.SetNetworkLayerForChecksum(ip); err != nil {
			return err
		}
		var payload []byte
		if i == 0 {
			payload = []byte(http500Header)
		} else {
			// Lower-case letters: no byte of the body starts a status line.
			payload = make([]byte, length-14-20-20)
			for j := range payload {
				payload[j] = 'a' + byte((i+j)%26)
			}
		}
		seq += uint32(len(payload))
		opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
		if err := gopacket.SerializeLayers(buf, opts, eth, ip, t, gopacket.Payload(payload)); err != nil {
			return err
		}
		writePacket(bw, ts, buf.Bytes())
		ts = ts.Add(10 * time.Microsecond)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// The classic pcap format, written by hand (gopacket's pcapgo would pull
// new modules into go.mod): little-endian, microsecond timestamps,
// Ethernet link type.
func writeFileHeader(w *bufio.Writer) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], 65535)                           // snaplen
	binary.LittleEndian.PutUint32(h[20:], uint32(layers.LinkTypeEthernet)) // 1
	w.Write(h[:])
}

func writePacket(w *bufio.Writer, ts time.Time, frame []byte) {
	var h [16]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(ts.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(ts.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(frame)))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(frame)))
	w.Write(h[:])
	w.Write(frame)
}
