package ipfix

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/testutil"
)

// nfacctd runs pmacct's IPFIX collector on a free UDP port with the print
// plugin writing one JSON object per flow.
type nfacctd struct {
	cmd  *exec.Cmd
	out  string
	log  string
	port int
}

func startNfacctd(t *testing.T, listen string) *nfacctd {
	t.Helper()
	bin := testutil.RequirePeer(t, "nfacctd")
	dir := t.TempDir()
	free := listenUDP(t, "udp", listen)
	port := free.LocalAddr().(*net.UDPAddr).Port
	host := free.LocalAddr().(*net.UDPAddr).IP.String()
	free.Close()
	n := &nfacctd{out: filepath.Join(dir, "flows.json"), log: filepath.Join(dir, "nfacctd.log"), port: port}
	conf := fmt.Sprintf(`daemonize: false
nfacctd_ip: %s
nfacctd_port: %d
nfacctd_pipe_size: 8388608
logfile: %s
timestamps_utc: true
timestamps_since_epoch: true
plugins: print[p]
aggregate[p]: src_host, dst_host, src_port, dst_port, proto, tcpflags, tos, in_iface, out_iface, src_mac, dst_mac, etype, timestamp_start, timestamp_end, sampling_rate, sampling_direction
print_output[p]: json
print_output_file[p]: %s
print_output_file_append[p]: true
print_refresh_time[p]: 1
print_num_protos[p]: true
`, host, port, n.log, n.out)
	cf := filepath.Join(dir, "nfacctd.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(bin, "-f", cf)
	// nfacctd forks its plugins: a process group lets a failed test stop
	// them all.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.cmd.ProcessState == nil {
			_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
			_ = n.cmd.Wait()
		}
	})
	// Ready once the core listens and the print plugin has started.
	for i := 0; ; i++ {
		if i == 200 {
			logs, _ := os.ReadFile(n.log)
			t.Fatalf("nfacctd not ready within 10 s:\n%s", logs)
		}
		logs, _ := os.ReadFile(n.log)
		if strings.Contains(string(logs), "waiting for NetFlow/IPFIX data") && strings.Contains(string(logs), "JSON: setting object handlers") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return n
}

// wait reads the JSON objects the print plugin appends every second until
// there are want of them (or 30 s passed), then stops nfacctd with SIGINT
// (pmacct ignores SIGTERM).
func (n *nfacctd) wait(t *testing.T, want int) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i := 0; i < 300; i++ {
		out = n.read(t)
		if len(out) >= want {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = n.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- n.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatal("nfacctd did not exit on SIGINT")
	}
	if len(out) < want {
		logs, _ := os.ReadFile(n.log)
		t.Logf("nfacctd log:\n%s", logs)
		out = n.read(t)
	}
	return out
}

func (n *nfacctd) read(t *testing.T) []map[string]any {
	t.Helper()
	f, err := os.Open(n.out)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber() // 64-bit counters do not survive float64
		if err := d.Decode(&m); err != nil {
			return out // a line being written
		}
		out = append(out, m)
	}
	return out
}

func TestNfacctdDecodesUDP(t *testing.T) {
	for _, tc := range []struct{ name, listen, host string }{{"ipv4", "127.0.0.1:0", "127.0.0.1"}, {"ipv6", "[::1]:0", "[::1]"}} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNfacctd(t, tc.listen)
			c := newClient(t, fmt.Sprintf("ipfix+udp://%s:%d", tc.host, n.port), Options{})
			recs := peerRecords(500)
			ctx := context.Background()
			failed, err := c.Send(ctx, recs)
			if err != nil || len(failed) > 0 {
				t.Fatalf("Send: %v", err)
			}
			// nfacctd accounts IP flows only: the non-IP template's
			// records (ARP here) are received but not printed.
			var ipRecs []flow.Record
			for _, r := range recs {
				if r.EtherType == flow.EtherTypeIPv4 || r.EtherType == flow.EtherTypeIPv6 {
					ipRecs = append(ipRecs, r)
				}
			}
			got := n.wait(t, len(ipRecs))
			assertNfacctd(t, got, ipRecs)
		})
	}
}

// assertNfacctd matches nfacctd's objects to records by packet count (the
// records' identity) and compares every field nfacctd prints.
func assertNfacctd(t *testing.T, got []map[string]any, recs []flow.Record) {
	t.Helper()
	byID := map[int]map[string]any{}
	for _, g := range got {
		n, _ := g["packets"].(json.Number)
		id, _ := n.Int64()
		if _, dup := byID[int(id)]; dup {
			t.Fatalf("two objects with packets=%v", id)
		}
		byID[int(id)] = g
	}
	if len(got) != len(recs) {
		t.Errorf("nfacctd printed %d flows, %d sent", len(got), len(recs))
	}
	for i := range recs {
		r := &recs[i]
		g, ok := byID[int(r.Packets)]
		if !ok {
			t.Errorf("record %d missing", r.Packets)
			continue
		}
		for k, w := range nfacctdExpect(r) {
			if v := fmt.Sprint(g[k]); v != w {
				t.Errorf("record %d: %s = %s, want %s (%v)", r.Packets, k, v, w, g)
				break
			}
		}
	}
}

func nfacctdExpect(r *flow.Record) map[string]string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	ip := r.EtherType == flow.EtherTypeIPv4 || r.EtherType == flow.EtherTypeIPv6
	src, dst := "0.0.0.0", "0.0.0.0"
	if ip {
		src, dst = r.SrcIP().String(), r.DstIP().String()
	}
	sp, dp := u(uint64(r.SrcPort)), u(uint64(r.DstPort))
	if r.Proto == 1 || r.Proto == 58 || !ip {
		sp, dp = "0", "0"
	}
	in, out := r.IfIndex, uint32(0)
	if r.Direction == flow.Egress {
		in, out = 0, r.IfIndex
	}
	ms := func(t time.Time) string { return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000) }
	// Not compared, because pmacct 1.7.7 does not decode them as sent:
	// tcp_flags (it prints 0 for every record with the 2-byte RFC 7125
	// element, whatever the flags),
	// tos (it reads ipClassOfService 5, not ipDiffServCodePoint 195),
	// sampling_rate (from its own sampling elements, not loupeSamplingRate).
	// tshark checks those fields.
	return map[string]string{
		"ip_proto": u(uint64(r.Proto)), "sampling_direction": map[flow.Direction]string{flow.Ingress: "i", flow.Egress: "e"}[r.Direction],
		"ip_src": src, "ip_dst": dst, "port_src": sp, "port_dst": dp,
		"bytes": u(r.Bytes), "packets": u(r.Packets),
		"iface_in": u(uint64(in)), "iface_out": u(uint64(out)),
		"mac_src": net.HardwareAddr(r.SrcMAC[:]).String(), "mac_dst": net.HardwareAddr(r.DstMAC[:]).String(),
		"etype":           strings.ToLower(strconv.FormatUint(uint64(r.EtherType), 16)),
		"timestamp_start": ms(r.FirstSeen), "timestamp_end": ms(r.LastSeen),
	}
}
