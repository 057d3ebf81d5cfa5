package datapath

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
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

// httpClasses is the number of a server's entries: requests, and
// responses of each status class (HTTP_CLASSES).
const httpClasses = 6

// httpServers is the number of servers HTTP metrics of series entries
// hold, "other" included.
func httpServers(series int) int { return max(2, series/httpClasses) }

// HTTPStats reads the HTTP metrics, summed over the CPUs: every class of
// every server that counted one, and every class of "other", counted or
// not, as the series of the metrics always hold it.
func (d *Datapath) HTTPStats() ([]HTTPStat, error) {
	servers := map[uint32]HTTPServer{0: {}}
	var (
		k  loupeHttpStatsKey
		id uint32
	)
	it := d.objs.CaptureHttpServers.Iterate()
	for it.Next(&k, &id) {
		servers[id] = HTTPServer{Addr: netip.AddrFrom16(k.Addr).Unmap(), Port: k.Port}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read HTTP metrics' servers: %w", err)
	}
	ids := slices.Sorted(maps.Keys(servers))
	var (
		out []HTTPStat
		per []loupeHttpStats
	)
	for _, id := range ids {
		for class := range uint32(httpClasses) {
			if err := d.objs.CaptureHttp.Lookup(id*httpClasses+class, &per); err != nil {
				return out, fmt.Errorf("read HTTP metrics of server %d: %w", id, err)
			}
			s := HTTPStat{Class: uint8(class), Server: servers[id]}
			for _, v := range per {
				s.Count += v.Count
				s.LatencyCount += v.LatencyCount
				s.LatencySum += v.LatencyNs
				for i, n := range v.Hist {
					s.Hist[i] += n
				}
			}
			if s.Count > 0 || id == 0 {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
