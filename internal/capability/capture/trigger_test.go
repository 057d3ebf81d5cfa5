package capture

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"loupe/internal/datapath"
)

func TestParseTrigger(t *testing.T) {
	for _, tc := range []struct {
		in    string
		name  string
		text  string
		rules []datapath.Rule
	}{
		{in: "http.status=500-599", name: "http.status=500-599",
			text:  "http.status=500-599 packets=10000 bytes=67108864 duration=5m0s",
			rules: []datapath.Rule{{Kind: datapath.RuleHTTPStatus, StatusLo: 500, StatusHi: 599, Sample: 1, MaxPackets: 10000, MaxBytes: 64 << 20, MaxDuration: 5 * time.Minute}}},
		{in: "  http.status=503   name=unavail  packets=0 bytes=1M duration=30s ", name: "unavail",
			text:  "http.status=503 packets=0 bytes=1048576 duration=30s",
			rules: []datapath.Rule{{Kind: datapath.RuleHTTPStatus, StatusLo: 503, StatusHi: 503, Sample: 1, MaxBytes: 1 << 20, MaxDuration: 30 * time.Second}}},
		{in: "http.status=500|502-504 sample=1/10", name: "http.status=500|502-504",
			text: "http.status=500|502-504 sample=1/10 packets=10000 bytes=67108864 duration=5m0s",
			rules: []datapath.Rule{
				{Kind: datapath.RuleHTTPStatus, StatusLo: 500, StatusHi: 500, Sample: 10, MaxPackets: 10000, MaxBytes: 64 << 20, MaxDuration: 5 * time.Minute},
				{Kind: datapath.RuleHTTPStatus, StatusLo: 502, StatusHi: 504, Sample: 10, MaxPackets: 10000, MaxBytes: 64 << 20, MaxDuration: 5 * time.Minute},
			}},
		{in: "http.status=500-599 packets=5 filter=tcp port 8080 and host 10.0.0.2", name: "http.status=500-599",
			text:  "http.status=500-599 packets=5 bytes=67108864 duration=5m0s filter=tcp port 8080 and host 10.0.0.2",
			rules: []datapath.Rule{{Kind: datapath.RuleHTTPStatus, StatusLo: 500, StatusHi: 599, Sample: 1, MaxPackets: 5, MaxBytes: 64 << 20, MaxDuration: 5 * time.Minute}}},
		{in: "tcp.rst sample=4 duration=0 bytes=2k", name: "tcp.rst",
			text:  "tcp.rst sample=1/4 packets=10000 bytes=2048 duration=0",
			rules: []datapath.Rule{{Kind: datapath.RuleTCPReset, Sample: 4, MaxPackets: 10000, MaxBytes: 2048}}},
	} {
		tr, err := ParseTrigger(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if tr.Name != tc.name || tr.Text != tc.text {
			t.Errorf("%q: name %q text %q, want %q %q", tc.in, tr.Name, tr.Text, tc.name, tc.text)
		}
		got := tr.rules()
		if len(got) != len(tc.rules) {
			t.Errorf("%q: rules %+v, want %+v", tc.in, got, tc.rules)
			continue
		}
		for i := range got {
			if got[i] != tc.rules[i] {
				t.Errorf("%q: rule %d %+v, want %+v", tc.in, i, got[i], tc.rules[i])
			}
		}
		// The canonical text reads back to the same trigger.
		again, err := ParseTrigger(tr.Text)
		if err != nil || again.Text != tr.Text {
			t.Errorf("%q: canonical %q reads back as %q (%v)", tc.in, tr.Text, again.Text, err)
		}
	}
}

func TestParseTriggerErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty trigger"},
		{"http.status", "is not an event"},
		{"http.status=", "needs codes"},
		{"http.status=600", "from 100 to 599"},
		{"http.status=599-500", "is empty"},
		{"http.status=5xx", "from 100 to 599"},
		{"dns.rcode=3", "is not an event"},
		{"tcp.rst sample=0", "one connection in N"},
		{"tcp.rst sample", "want KEY=VALUE"},
		{"tcp.rst packets=-1", "number of packets"},
		{"tcp.rst bytes=1T", "number of bytes"},
		{"tcp.rst duration=1.5s", "whole seconds"},
		{"tcp.rst name=a/b", "a name holds"},
		{"tcp.rst color=red", "unknown option color"},
		{"tcp.rst packets=1 packets=2", "given twice"},
		{"http.status=100|200|300|400|500|501|502|503|504", "at most 8"},
		{"http.status=500 filter=", "needs a pcap filter"},
		{"http.status=500 filter=vlan 7", `"vlan" is not supported`},
		{"http.status=500 filter=tcp port", "pcap filter"},
	} {
		_, err := ParseTrigger(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

func TestParseTriggersLimits(t *testing.T) {
	if ts, err := parseTriggers(nil); err != nil || len(ts) != 1 || ts[0].Name != "http.status=500-599" {
		t.Errorf("no triggers: %+v, %v; want the default", ts, err)
	}
	if _, err := parseTriggers([]string{"http.status=500", "http.status=500 sample=2"}); err == nil || !strings.Contains(err.Error(), "two triggers named") {
		t.Errorf("same name twice: %v", err)
	}
	if _, err := parseTriggers([]string{"http.status=500|501|502|503|504", "tcp.rst", "http.status=404|405 name=x", "http.status=300 name=y"}); err == nil || !strings.Contains(err.Error(), "9 rules") {
		t.Errorf("9 rules: %v", err)
	}
}

// TestTriggerSlots adds and deletes triggers and checks the rules the
// datapath would get: a trigger keeps its slots while it lives.
func TestTriggerSlots(t *testing.T) {
	u, err := New(Config{Triggers: []string{"http.status=500|502 name=a", "tcp.rst name=b"}}, "test", discard())
	if err != nil {
		t.Fatal(err)
	}
	want := func(slots ...string) {
		t.Helper()
		for i, s := range slots {
			if u.slots[i] != s {
				t.Fatalf("slots %q, want %q", u.slots, slots)
			}
		}
	}
	want("a", "a", "b", "")
	if err := u.DeleteTrigger("a"); err != nil {
		t.Fatal(err)
	}
	want("", "", "b", "")
	tr, _ := ParseTrigger("http.status=404 name=c")
	if err := u.AddTrigger(tr); err != nil {
		t.Fatal(err)
	}
	want("c", "", "b", "")
	if err := u.AddTrigger(tr); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("adding c twice: %v", err)
	}
	if err := u.DeleteTrigger("zz"); err == nil {
		t.Error("deleting an unknown trigger succeeded")
	}
	big, _ := ParseTrigger("http.status=100|101|102|103|104|105|106 name=big")
	if err := u.AddTrigger(big); err == nil || !strings.Contains(err.Error(), "needs 7 rules, 6 of 8 are free") {
		t.Errorf("adding 7 rules to 6 free slots: %v", err)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
