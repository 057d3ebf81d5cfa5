package datapath

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"loupe/internal/rules"
)

// BenchmarkRules times one run of the entry program (BPF_PROG_TEST_RUN)
// on a TCP packet, for the flows-only build and for the build with rules:
// no rule, 10 and 10 000 rules (a /24 destination each, the packet's
// among them, skipped or measured), and the packet matching no rule of the
// 10 000, and one rule without a prefix (no trie lookup). What the rules
// add per packet, and that a skipped packet costs less than a measured one.
// Every run but the first of a case finds the flow's verdict in the cache;
// the nocache cases judge every packet, as a flow's first packet is.
//
//	go test -run '^$' -bench Rules ./internal/datapath
func BenchmarkRules(b *testing.B) {
	if testing.Short() {
		b.Skip("loads BPF programs")
	}
	set := func(n int, action string) *rules.Compiled {
		var sb strings.Builder
		for i := range n {
			fmt.Fprintf(&sb, "dst=10.%d.%d.0/24 proto=tcp %s\n", i/256, i%256, action)
		}
		s, err := rules.ParseFile(strings.NewReader(sb.String()))
		if err != nil {
			b.Fatal(err)
		}
		c, err := rules.Compile(s)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	// One rule without a prefix: judged without a trie lookup, so that
	// the rule's own work shows apart from the trie's.
	wild := func() *rules.Compiled {
		s, err := rules.ParseFile(strings.NewReader("proto=tcp measure\n"))
		if err != nil {
			b.Fatal(err)
		}
		c, err := rules.Compile(s)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}()
	hit := ruleFrame(b, layers.IPProtocolTCP, "192.168.0.1", "10.0.5.9", 40000, 80, 100)
	miss := ruleFrame(b, layers.IPProtocolTCP, "192.168.0.1", "172.16.5.9", 40000, 80, 100)
	for _, tc := range []struct {
		name    string
		caps    []string
		rules   *rules.Compiled
		frame   []byte
		nocache bool
	}{
		{"flows-only", []string{"flows"}, nil, hit, false},
		{"rules-0", []string{"flows", "rules"}, set(0, "measure"), hit, false},
		{"rules-1-noprefix-measure", []string{"flows", "rules"}, wild, hit, false},
		{"rules-10-measure", []string{"flows", "rules"}, set(10, "measure"), hit, false},
		{"rules-10000-measure", []string{"flows", "rules"}, set(10000, "measure"), hit, false},
		{"rules-10000-skip", []string{"flows", "rules"}, set(10000, "skip"), hit, false},
		{"rules-10000-no-match", []string{"flows", "rules"}, set(10000, "skip"), miss, false},
		{"rules-10000-measure-nocache", []string{"flows", "rules"}, set(10000, "measure"), hit, true},
		{"rules-10000-skip-nocache", []string{"flows", "rules"}, set(10000, "skip"), hit, true},
	} {
		dp, err := Load(Options{FlowBudget: 1024, RingBufSize: 1 << 16, Capabilities: tc.caps, JudgeEveryPacket: tc.nocache})
		if err != nil {
			b.Fatal(err)
		}
		if tc.rules != nil {
			if _, err := dp.SetRules(RulesFrom(tc.rules, nil)); err != nil {
				b.Fatal(err)
			}
		}
		prog := dp.Ingress()
		b.Run(tc.name, func(b *testing.B) {
			_, d, err := prog.Benchmark(tc.frame, b.N, b.ResetTimer)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/packet")
		})
		dp.Close()
	}
}
