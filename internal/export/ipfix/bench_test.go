package ipfix

import (
	"context"
	"net"
	"testing"
)

// BenchmarkEncode measures encoding alone: records into MTU-sized
// messages, half IPv4 and half IPv6, no I/O.
func BenchmarkEncode(b *testing.B) {
	e := newEncoder(1, DefaultMTUUDP, DefaultEnterpriseNumber)
	recs := numbered(4096, true)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for n < b.N {
		for i := 0; i < len(recs) && n < b.N; {
			_, k, _ := e.message(recs[i:min(len(recs), i+b.N-n)], false, 0, 0)
			i += k
			n += k
		}
	}
}

// BenchmarkSendUDP measures Send over loopback UDP to a socket that
// drains what it receives: encoding plus one write system call per
// message. ns/op is per record.
func BenchmarkSendUDP(b *testing.B) {
	col, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer col.Close()
	_ = col.SetReadBuffer(8 << 20)
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, err := col.Read(buf); err != nil {
				return
			}
		}
	}()
	c, err := New("ipfix+udp://"+col.LocalAddr().String(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	recs := numbered(4096, true)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(recs) {
		batch := recs[:min(len(recs), b.N-n)]
		if failed, err := c.Send(ctx, batch); err != nil || len(failed) > 0 {
			b.Fatal(err)
		}
	}
}
