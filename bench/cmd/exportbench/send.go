package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"syscall"
	"time"

	"loupe/internal/config"
	"loupe/internal/export/delivery"
	"loupe/internal/export/targets"
	"loupe/internal/flow"
)

// result is what send prints.
type result struct {
	Target        string  `json:"target"`
	Records       int     `json:"records"`
	Sent          uint64  `json:"sent"`
	Dropped       uint64  `json:"dropped"`
	Seconds       float64 `json:"seconds"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	RecordsPerSec float64 `json:"records_per_second"`
	CPUPer10kPerS float64 `json:"cpu_percent_per_10k_records_per_second"`
	TargetRate    int     `json:"target_rate"`
	MaxRSSKiB     int64   `json:"max_rss_kib"`
	GOMAXPROCS    string  `json:"gomaxprocs"`
}

func send(args []string) error {
	fs := flag.NewFlagSet("send", flag.ExitOnError)
	target := fs.String("target", "", "export target URL, as --export takes it")
	n := fs.Int("records", 2_000_000, "records to export")
	rate := fs.Int("rate", 0, "records per second to offer (0: as fast as the exporter takes them)")
	flows := fs.Int("flows", 100_000, "distinct flows the records cycle over")
	fs.Parse(args)
	if *target == "" {
		return fmt.Errorf("send: -target is required")
	}

	cfg := config.Default()
	cfg.Delivery.ShutdownTimeout = time.Minute
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sink, q, err := targets.Open(*target, cfg.Exporters, log)
	if err != nil {
		return err
	}
	recs := records(*flows)
	const batch = 1024
	capacity := cfg.Delivery.QueueSize

	start, cpu0 := time.Now(), cpuTime()
	ctx := context.Background()
	for done := 0; done < *n; {
		k := min(batch, *n-done)
		if *rate > 0 {
			// Offer records at the rate: wait until the schedule says
			// the next batch is due.
			due := start.Add(time.Duration(float64(done) / float64(*rate) * float64(time.Second)))
			time.Sleep(time.Until(due))
		} else if q != nil {
			// As fast as it goes, without dropping: keep the queue
			// from overflowing, so what is measured is delivery.
			for q.Stats().Queued > capacity-k {
				time.Sleep(50 * time.Microsecond)
			}
		}
		off := done % len(recs)
		if off+k > len(recs) {
			off = 0
		}
		now := time.Now()
		b := recs[off : off+k]
		for i := range b {
			b[i].LastSeen = now
			b[i].FirstSeen = now.Add(-time.Second)
		}
		if err := sink.Write(ctx, b); err != nil {
			return err
		}
		done += k
	}
	sink.Flush(ctx)
	if err := sink.Close(); err != nil {
		return err
	}
	elapsed, cpu := time.Since(start).Seconds(), cpuTime()-cpu0
	st := delivery.Stats{Sent: uint64(*n)} // a sink without a queue writes synchronously
	if q != nil {
		st = q.Stats()
	}
	res := result{
		Target: *target, Records: *n, Sent: st.Sent, Dropped: st.Dropped(),
		Seconds: elapsed, CPUSeconds: cpu,
		RecordsPerSec: float64(st.Sent) / elapsed,
		TargetRate:    *rate,
		MaxRSSKiB:     maxRSS(),
		GOMAXPROCS:    os.Getenv("GOMAXPROCS"),
	}
	if st.Sent > 0 {
		// CPU seconds per second (×100: percent of one core) at a rate of
		// 10 000 records per second, from the CPU spent per record.
		res.CPUPer10kPerS = cpu / float64(st.Sent) * 10_000 * 100
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// records builds n distinct flows, IPv4 and IPv6 mixed, TCP and UDP.
func records(n int) []flow.Record {
	out := make([]flow.Record, n)
	for i := range out {
		r := &out[i]
		r.Iface, r.IfIndex = "eth0", 2
		r.Direction = flow.Direction(i % 2)
		r.SrcMAC = [6]byte{2, 0, 0, 0, 0, 1}
		r.DstMAC = [6]byte{2, 0, 0, 0, 0, 2}
		if i%4 == 3 {
			r.EtherType = flow.EtherTypeIPv6
			r.SrcAddr = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}).As16()
			r.DstAddr = netip.MustParseAddr("2001:db8::ffff").As16()
		} else {
			r.EtherType = flow.EtherTypeIPv4
			r.SrcAddr = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).As16()
			r.DstAddr = netip.MustParseAddr("192.0.2.1").As16()
		}
		r.Proto = []uint8{6, 17}[i%2]
		r.SrcPort, r.DstPort = uint16(1024+i%60000), 443
		r.Packets, r.Bytes = uint64(1+i%50), uint64(64+i%50*1400)
		r.TCPFlags = flow.TCPSyn | flow.TCPAck
		r.Sampling = 1
	}
	return out
}

func cpuTime() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func maxRSS() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss
}
