package datapath

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// HTTP metrics of the connections the capture follows (bpf/capture/
// httpstats.h): per server, requests, responses by class and a latency
// histogram, summed over the CPUs here.

// HTTPLatencyBuckets is the number of latency buckets: 0 holds under 1 us,
// i holds [2^(i-1), 2^i) us, the last everything from 2^22 us on.
const HTTPLatencyBuckets = LatencyBuckets

// HTTPServer identifies a server in the metrics; the zero Addr with port 0
// is "other", where servers past the series cap are counted.
type HTTPServer struct {
	Addr netip.Addr
	Port uint16
}

// HTTPStat is one class of one server: requests (Class 0) or responses of
// a status class (1 to 5).
type HTTPStat struct {
	Server       HTTPServer
	Class        uint8
	Count        uint64
	LatencyCount uint64 // responses whose request was seen
	LatencySum   uint64 // ns
	Hist         [HTTPLatencyBuckets]uint64
}

// initHTTPOther creates the "other" entries the kernel folds into once the
// table is full, so that they always exist.
func (d *Datapath) initHTTPOther() error {
	per := make([]loupeHttpStats, d.ncpu)
	for class := uint8(0); class <= 5; class++ {
		k := loupeHttpStatsKey{Class: class}
		if err := d.objs.CaptureHttp.Update(&k, per, ebpf.UpdateNoExist); err != nil {
			return fmt.Errorf("create the HTTP metrics' \"other\" entries: %w", err)
		}
	}
	return nil
}

// HTTPStats reads the HTTP metrics, summed over the CPUs.
func (d *Datapath) HTTPStats() ([]HTTPStat, error) {
	var (
		k   loupeHttpStatsKey
		per []loupeHttpStats
		out []HTTPStat
	)
	it := d.objs.CaptureHttp.Iterate()
	for it.Next(&k, &per) {
		s := HTTPStat{Class: k.Class, Server: HTTPServer{Port: k.Port}}
		if k.Port != 0 || k.Addr != [16]byte{} {
			s.Server.Addr = netip.AddrFrom16(k.Addr).Unmap()
		}
		for _, v := range per {
			s.Count += v.Count
			s.LatencyCount += v.LatencyCount
			s.LatencySum += v.LatencyNs
			for i, n := range v.Hist {
				s.Hist[i] += n
			}
		}
		out = append(out, s)
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("read HTTP metrics: %w", err)
	}
	return out, nil
}
