package pcapfilter

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/net/bpf"

	"loupe/internal/testutil"
)

// The numbers this package stands on: for every expression below, the
// frames tcpdump keeps from buildFrames() must be exactly the frames the
// filter matches, both as cBPF in x/net/bpf's VM and as eBPF in the kernel
// (BPF_PROG_TEST_RUN). tcpdump's verdicts are recorded in
// testdata/tcpdump.golden, so the comparison also runs where tcpdump is not
// installed; where it is, the recording is checked against it first.
// Regenerate with: go test ./internal/pcapfilter -run TestAgainstTcpdump -update

var update = flag.Bool("update", false, "rewrite testdata/tcpdump.golden from tcpdump")

const goldenPath = "testdata/tcpdump.golden"

var tcpdumpExprs = []string{
	"",
	"tcp",
	"udp",
	"icmp",
	"icmp6",
	"ip",
	"ip6",
	"arp",
	"rarp",
	"sctp",
	"igmp",
	"tcp port 80",
	"port 53",
	"not port 22",
	"tcp port 80 and host 10.0.0.2",
	"host 10.0.0.2",
	"src host 10.0.0.1",
	"dst host 2001:db8::2",
	"ip6 and udp",
	"net 10.0.0.0/8",
	"net 192.168.1.0 mask 255.255.255.0",
	"dst net 2001:db8::/32",
	"src net 2001:db8:1::/48",
	"net 10",
	"portrange 8000-8080",
	"tcp dst portrange 8000-8080",
	"udp src or dst port 5353",
	"sctp port 80",
	"tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
	"tcp[tcpflags] & (tcp-rst|tcp-ack) == (tcp-rst|tcp-ack)",
	"tcp[tcpflags] == tcp-syn",
	"tcp[13] & 2 != 0 and (tcp[2:2] = 80 or tcp[0:2] = 80)",
	"icmp[icmptype] == icmp-echo",
	"icmp6[icmp6type] != icmp6-echo and icmp6[icmp6type] != icmp6-echoreply",
	"icmp[0] = 3 or icmp6[0] = 135",
	"ether host 02:00:00:00:00:0c",
	"ether src 02:00:00:00:00:0a and not ether dst 02:00:00:00:00:0b",
	"ether broadcast",
	"ether multicast",
	"ip multicast or ip6 multicast",
	"greater 100",
	"less 64",
	"len >= 1000 and tcp",
	"len - 14 > 50",
	"ip[8] = 64 and ip[2:2] > 500",
	"(ip[0] & 0xf) > 5",
	"ip proto 47",
	"proto \\udp",
	"ether proto 0x88cc",
	"udp port 53 or icmp",
	"host 10.0.0.1 or 10.0.0.2 and port 53",
	"port 80 or 443 or 22",
	"not (tcp or udp)",
	"udp[8:2] = 0x1234",
	"ip6[6] = 0",
	"ether[12:2] = 0x8100",
	"tcp and (ip[6:2] & 0x1fff) != 0",
	"arp and src host 10.0.0.2",
	"tcp[100] = 5 or udp",
	"not tcp[40] = 0",
	"ip[0] ^ 0x40 & 0xf0 = 0x05",
}

// verdicts maps an expression to the sorted indices of the frames it keeps.
type verdicts map[string][]int

func TestAgainstTcpdump(t *testing.T) {
	frames, names := buildFrames(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "frames.pcap")
	writePcap(t, in, frames)
	sum := sha256.Sum256(mustRead(t, in))
	framesHash := hex.EncodeToString(sum[:])

	want := readGolden(t, framesHash)
	if path, err := exec.LookPath("tcpdump"); err == nil {
		live := runTcpdump(t, path, in, dir)
		if *update {
			writeGolden(t, framesHash, live)
			want = live
		}
		for _, e := range tcpdumpExprs {
			if !slices.Equal(live[e], want[e]) {
				t.Errorf("%s is stale for %q: tcpdump keeps %v, the file says %v (rerun with -update)", goldenPath, e, live[e], want[e])
			}
		}
	} else {
		t.Logf("tcpdump is not installed: comparing with the verdicts recorded in %s", goldenPath)
	}
	if want == nil {
		t.Fatalf("%s has no verdicts for these frames and tcpdump is not installed to make them", goldenPath)
	}

	privileged := os.Geteuid() == 0
	if !privileged {
		if os.Getenv(testutil.RequirePrivilegedEnv) == "1" {
			t.Fatalf("not root, and %s=1 forbids skipping the eBPF comparison", testutil.RequirePrivilegedEnv)
		}
		t.Log("not root: checking the cBPF only; the eBPF comparison needs BPF_PROG_TEST_RUN")
	}
	for _, e := range tcpdumpExprs {
		t.Run(e, func(t *testing.T) {
			f, err := Compile(e)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			exp, ok := want[e]
			if !ok {
				t.Fatalf("no tcpdump verdict for %q (rerun with -update)", e)
			}
			check := func(what string, got []int) {
				t.Helper()
				if !slices.Equal(got, exp) {
					t.Errorf("%s matches frames %v, tcpdump %v\n%s", what, got, exp, diffNames(got, exp, names))
				}
			}
			check("cBPF", vmVerdicts(t, f, frames))
			if privileged {
				check("eBPF", ebpfVerdicts(t, f, frames))
			}
		})
	}
	if t.Failed() {
		return
	}
	t.Logf("%d expressions agree with tcpdump on %d frames", len(tcpdumpExprs), len(frames))
}

func diffNames(got, want []int, names []string) string {
	var b strings.Builder
	for _, i := range got {
		if !slices.Contains(want, i) {
			fmt.Fprintf(&b, "  extra   %d %s\n", i, names[i])
		}
	}
	for _, i := range want {
		if !slices.Contains(got, i) {
			fmt.Fprintf(&b, "  missing %d %s\n", i, names[i])
		}
	}
	return b.String()
}

// vmVerdicts runs the cBPF program in golang.org/x/net/bpf's VM.
func vmVerdicts(t *testing.T, f *Filter, frames [][]byte) []int {
	t.Helper()
	out := []int{}
	if f.MatchesAll() {
		for i := range frames {
			out = append(out, i)
		}
		return out
	}
	vm, err := bpf.NewVM(f.CBPF())
	if err != nil {
		t.Fatalf("x/net/bpf VM: %v", err)
	}
	for i, fr := range frames {
		n, err := vm.Run(fr)
		if err != nil {
			t.Fatalf("VM on frame %d: %v", i, err)
		}
		if n != 0 {
			out = append(out, i)
		}
	}
	return out
}

// matchReturns1 is the onMatch tests use: return 1 on a match, so the
// program's return code is the verdict (-1, TC_ACT_UNSPEC, otherwise).
var matchReturns1 = asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}

func loadVerdictProg(t testing.TB, f *Filter) *ebpf.Program {
	t.Helper()
	spec, err := Program(f, matchReturns1)
	if err != nil {
		t.Fatalf("program: %v", err)
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load %q: %+v", f, ve)
		}
		t.Fatalf("load %q: %v", f, err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// ebpfVerdicts runs the eBPF program on each frame with BPF_PROG_TEST_RUN.
func ebpfVerdicts(t *testing.T, f *Filter, frames [][]byte) []int {
	t.Helper()
	testutil.RequirePrivileged(t)
	prog := loadVerdictProg(t, f)
	out := []int{}
	for i, fr := range frames {
		ret, err := prog.Run(&ebpf.RunOptions{Data: fr})
		if err != nil {
			t.Fatalf("run on frame %d: %v", i, err)
		}
		switch int32(ret) {
		case 1:
			out = append(out, i)
		case actUnspec:
		default:
			t.Fatalf("frame %d: program returned %d, want 1 or -1", i, int32(ret))
		}
	}
	return out
}

// runTcpdump asks tcpdump which frames each expression keeps.
func runTcpdump(t *testing.T, path, in, dir string) verdicts {
	t.Helper()
	v := verdicts{}
	for i, e := range tcpdumpExprs {
		out := filepath.Join(dir, fmt.Sprintf("out%d.pcap", i))
		cmd := exec.Command(path, "-nn", "-r", in, "-w", out, e)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("tcpdump %q: %v: %s", e, err, stderr.String())
		}
		v[e] = keptFrames(t, out)
	}
	return v
}

// keptFrames reads tcpdump's output and returns the frames' indices,
// recovered from their time stamps.
func keptFrames(t *testing.T, path string) []int {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	out := []int{}
	for {
		_, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		out = append(out, int(ci.Timestamp.Unix()-1_700_000_000))
	}
	slices.Sort(out)
	return out
}

// The golden file: a header with the frames' hash, then one line per
// expression: the expression, a tab, the kept frames' indices.
func readGolden(t *testing.T, framesHash string) verdicts {
	t.Helper()
	raw, err := os.ReadFile(goldenPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	if !sc.Scan() || sc.Text() != "# frames sha256 "+framesHash {
		t.Logf("%s was recorded for other frames; ignoring it", goldenPath)
		return nil
	}
	v := verdicts{}
	for sc.Scan() {
		e, list, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			t.Fatalf("%s: bad line %q", goldenPath, sc.Text())
		}
		idx := []int{}
		for _, s := range strings.Fields(list) {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: bad line %q", goldenPath, sc.Text())
			}
			idx = append(idx, n)
		}
		v[e] = idx
	}
	return v
}

func writeGolden(t *testing.T, framesHash string, v verdicts) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "# frames sha256 %s\n", framesHash)
	for _, e := range tcpdumpExprs {
		s := make([]string, len(v[e]))
		for i, n := range v[e] {
			s[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(&b, "%s\t%s\n", e, strings.Join(s, " "))
	}
	if err := writeFile(goldenPath, []byte(b.String())); err != nil {
		t.Fatal(err)
	}
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func vmMatches(t testing.TB, f *Filter, frame []byte) bool {
	t.Helper()
	if f.MatchesAll() {
		return true
	}
	vm, err := bpf.NewVM(f.CBPF())
	if err != nil {
		t.Fatal(err)
	}
	n, err := vm.Run(frame)
	if err != nil {
		t.Fatal(err)
	}
	return n != 0
}
