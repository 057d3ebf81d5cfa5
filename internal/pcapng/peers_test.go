package pcapng

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"loupe/internal/testutil"
)

// The real readers: what tshark, capinfos and tcpdump make of the Writer's
// output is what a user sees. Each is skipped when the tool is missing,
// unless CI_REQUIRE_PRIVILEGED=1 (then a missing tool fails the test).

// rootWarning is what tshark prints on stderr whenever it runs as root;
// any other stderr output (a damaged block, an unknown option) fails.
const rootWarning = "Running as user \"root\" and group \"root\". This could be dangerous.\n"

func writeFile(t *testing.T, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.pcapng")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs a peer and returns its stdout; it fails the test on a non-zero
// exit, or on stderr output other than allowed.
func run(t *testing.T, stdin io.Reader, allowed []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	err := cmd.Run()
	rest := stderr.String()
	for _, a := range allowed {
		rest = strings.Replace(rest, a, "", 1)
	}
	if err != nil || rest != "" {
		t.Fatalf("%s %s: %v; stderr: %q", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

var tsharkFields = []string{"frame.number", "frame.len", "frame.cap_len", "frame.time_epoch",
	"frame.interface_name", "frame.comment", "frame.packet_flags_direction"}

// TestTshark asserts every field tshark reads from every packet.
func TestTshark(t *testing.T) {
	bin := testutil.RequirePeer(t, "tshark")
	pkts := testPackets()
	path := writeFile(t, encode(t, pkts, testOptions()))
	args := []string{"-r", path, "-n", "-T", "fields", "-E", "separator=/t"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	out := run(t, nil, []string{rootWarning}, bin, args...)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(pkts) {
		t.Fatalf("tshark printed %d lines, want %d:\n%s", len(lines), len(pkts), out)
	}
	ws, names := expect(pkts, testSnap)
	for i, line := range lines {
		w := ws[i]
		dir := ""
		if w.dir != DirectionUnknown {
			dir = fmt.Sprintf("0x%08x", uint32(w.dir))
		}
		ns := pkts[i].TimeNs
		want := []string{strconv.Itoa(i + 1), strconv.Itoa(int(w.origLen)), strconv.Itoa(int(w.capLen)),
			fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9), names[w.ifid], w.comment, dir}
		got := strings.Split(line, "\t")
		if len(got) != len(want) {
			t.Errorf("packet %d: %d fields, want %d: %q", i+1, len(got), len(want), line)
			continue
		}
		for j := range want {
			if got[j] != want[j] {
				t.Errorf("packet %d %s = %q, want %q", i+1, tsharkFields[j], got[j], want[j])
			}
		}
	}
}

// TestTsharkRaw: a device without a link layer gets its own IDB of type
// RAW, and tshark decodes the IP header at the start of its packets.
func TestTsharkRaw(t *testing.T) {
	bin := testutil.RequirePeer(t, "tshark")
	pkts := []Packet{
		{TimeNs: base, Ifindex: 9, IfName: "wg0", LinkType: LinkTypeRaw, Direction: Inbound, Data: frame(60, 1)[14:]},
		{TimeNs: base + 1, Ifindex: 2, IfName: "eth0", Direction: Outbound, Data: frame(60, 2)},
	}
	path := writeFile(t, encode(t, pkts, testOptions()))
	out := run(t, nil, []string{rootWarning}, bin, "-r", path, "-n", "-T", "fields", "-E", "separator=/t",
		"-e", "frame.interface_name", "-e", "frame.protocols", "-e", "udp.srcport")
	want := "wg0\traw:ip:udp:data\t1\neth0\teth:ethertype:ip:udp:data\t2\n"
	if out != want {
		t.Errorf("tshark printed\n%s\nwant\n%s", out, want)
	}
}

// TestCapinfos checks the section header and interfaces as capinfos
// reports them.
func TestCapinfos(t *testing.T) {
	bin := testutil.RequirePeer(t, "capinfos")
	path := writeFile(t, encode(t, testPackets(), testOptions()))
	out := run(t, nil, nil, bin, path)
	for _, want := range []string{
		"File type:           Wireshark/... - pcapng\n",
		"File timestamp precision:  nanoseconds (9)\n",
		"Number of packets:   9\n",
		"Capture oper-sys:    " + testOS + "\n",
		"Capture application: " + testAppl + "\n",
		"Capture comment:     " + testSection + "\n",
		"Number of interfaces in file: 3\n",
		"Name = veth-b2\n",
		"Description = ifindex 7\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("capinfos lacks %q:\n%s", want, out)
		}
	}
}

// TestTcpdumpStream pipes a live stream into `tcpdump -r -`, as
// `loupe capture --follow -w - | tcpdump -r -` does: the first packets must
// be printed before the rest are written (Flush delivers whole blocks a
// reader can use at once), and every nanosecond timestamp must be right.
func TestTcpdumpStream(t *testing.T) {
	bin := testutil.RequirePeer(t, "tcpdump")
	pkts := testPackets()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-r", "-", "-nn", "-tt", "--nano", "-l")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, len(pkts)+10)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var got []string
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("tcpdump stopped after %d lines: %s", len(got), stderr.String())
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("tcpdump printed nothing for 10 s after %d lines (stream not flushed?)", len(got))
		}
		return ""
	}
	w := NewWriter(stdin, testOptions())
	half := len(pkts) / 2
	for i := range pkts {
		if err := w.WritePacket(&pkts[i]); err != nil {
			t.Fatal(err)
		}
		if i == half-1 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			for range half { // the stream stays open meanwhile
				got = append(got, next())
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	for l := range lines {
		got = append(got, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tcpdump: %v: %s", err, stderr.String())
	}
	if want := "reading from file -, link-type EN10MB (Ethernet), snapshot length 200\n"; stderr.String() != want {
		t.Errorf("tcpdump stderr %q, want %q", stderr.String(), want)
	}
	if len(got) != len(pkts) {
		t.Fatalf("tcpdump printed %d packets, want %d:\n%s", len(got), len(pkts), strings.Join(got, "\n"))
	}
	for i, l := range got {
		ns := pkts[i].TimeNs
		want := fmt.Sprintf("%d.%09d IP 10.99.0.1.%d > 10.99.0.2.9: UDP", ns/1e9, ns%1e9, 40000+i)
		if !strings.HasPrefix(l, want) {
			t.Errorf("tcpdump line %d: %q, want it to start %q", i+1, l, want)
		}
	}
}
