package capture

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cilium/ebpf/perf"

	"loupe/internal/api"
	"loupe/internal/datapath"
	"loupe/internal/pcapfilter"
	"loupe/internal/pcapng"
)

// CapturePath is the on-demand capture: POST a CaptureRequest, read a
// pcapng stream of the matching packets.
const CapturePath = api.Prefix + "capture"

// CaptureRequest is the body of POST /api/v1/capture.
type CaptureRequest struct {
	// Filter is a pcap filter (tcpdump syntax; docs/capture.md lists what
	// works); empty: every packet.
	Filter string `json:"filter"`
	// Ifaces are interface name globs (empty: every monitored interface).
	Ifaces []string `json:"ifaces,omitempty"`
	// Count ends the capture after this many packets (0: no limit).
	Count uint64 `json:"count,omitempty"`
	// Duration ends it after this long, Go syntax (empty: no limit).
	Duration string `json:"duration,omitempty"`
	// Snaplen is the bytes captured of each packet (0: all, up to 65000).
	Snaplen uint32 `json:"snaplen,omitempty"`
}

// onDemandBuffer is each CPU's perf buffer of an on-demand capture.
const onDemandBuffer = 4 << 20

// serveCapture runs one on-demand capture: the filter goes into the entry
// program's tail-call slots, matching packets stream back as pcapng until
// the count, the duration, the client or the agent ends it; then the slots
// are emptied. One at a time: the slots hold one filter.
func (u *Unit) serveCapture(w http.ResponseWriter, r *http.Request) {
	var req CaptureRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		api.WriteError(w, http.StatusBadRequest, "body: want {\"filter\": \"tcp port 80\", ...}: "+err.Error())
		return
	}
	var limit time.Duration
	if req.Duration != "" {
		d, err := time.ParseDuration(req.Duration)
		if err != nil || d <= 0 {
			api.WriteError(w, http.StatusBadRequest, fmt.Sprintf("duration %q: want a positive Go duration, e.g. 30s", req.Duration))
			return
		}
		limit = d
	}
	f, err := pcapfilter.Compile(req.Filter)
	if err != nil {
		api.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	ifindexes, err := matchIfaces(req.Ifaces)
	if err != nil {
		api.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !u.onDemand.TryLock() {
		api.WriteError(w, http.StatusConflict, "another on-demand capture is running: one at a time")
		return
	}
	defer u.onDemand.Unlock()

	rd, err := u.dp.OpenFilteredPackets(onDemandBuffer)
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer rd.Close()
	if err := u.dp.InstallCaptureFilter(f, datapath.FilterOptions{Ifindexes: ifindexes, Snaplen: req.Snaplen}); err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer func() {
		if err := u.dp.RemoveCaptureFilter(); err != nil {
			u.log.Error("removing an on-demand capture's filter", "err", err)
		}
	}()
	u.log.Info("on-demand capture started", "filter", f.String(), "ifaces", req.Ifaces, "count", req.Count, "duration", req.Duration)

	w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	pw := pcapng.NewWriter(w, pcapng.Options{UserAppl: "loupe " + u.version, Comment: "loupe capture --filter " + f.String()})
	if pw.Flush() != nil || rc.Flush() != nil {
		return
	}
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	n, lost, err := u.streamFiltered(r, rd, pw, rc, req.Count, deadline)
	u.stats.onDemandLost.Add(lost)
	u.log.Info("on-demand capture ended", "filter", f.String(), "packets", n, "lost", lost, "err", err)
}

// streamFiltered writes the filtered packets to pw, in time order, until
// count packets, the deadline, the client or the agent ends it.
func (u *Unit) streamFiltered(r *http.Request, rd *perf.Reader, pw *pcapng.Writer, rc *http.ResponseController,
	count uint64, deadline time.Time) (n, lost uint64, err error) {
	conv := u.newConv()
	o := &orderedRead{
		rd: rd, clock: u.clock, log: u.log, end: deadline,
		maxBytes: onDemandBuffer * runtime.NumCPU(),
		done: func() bool {
			return r.Context().Err() != nil || (count > 0 && n >= count) || (!deadline.IsZero() && !time.Now().Before(deadline))
		},
		emit: func(p *datapath.CapturedPacket) error {
			if count > 0 && n >= count {
				return errEnough
			}
			if err := pw.WritePacket(conv.pcapng(p)); err != nil {
				return err
			}
			n++
			return nil
		},
		tick: func() error {
			if err := pw.Flush(); err != nil {
				return err
			}
			return rc.Flush()
		},
	}
	err = o.run()
	if r.Context().Err() != nil {
		err = nil // the client left: what it did not read is not an error
	}
	return n, o.lost, err
}

// matchIfaces returns the indexes of the interfaces whose names match one
// of globs; none: every interface (nil).
func matchIfaces(globs []string) ([]uint32, error) {
	if len(globs) == 0 {
		return nil, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, ifc := range ifs {
		for _, g := range globs {
			ok, err := filepath.Match(g, ifc.Name)
			if err != nil {
				return nil, fmt.Errorf("interface glob %q: %w", g, err)
			}
			if ok {
				out = append(out, uint32(ifc.Index))
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no interface matches %q", globs)
	}
	return out, nil
}
