package pcapfilter

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"
	"golang.org/x/net/bpf"
)

// FuzzCompile: no input may panic; an accepted expression must also turn
// into eBPF (cbpfc accepts everything the generator emits) and run in the
// cBPF VM; a rejected one must be an *Error.
// Run: go test ./internal/pcapfilter -run '^$' -fuzz FuzzCompile -fuzztime 60s
func FuzzCompile(f *testing.F) {
	for _, e := range tcpdumpExprs {
		f.Add(e)
	}
	for _, e := range []string{"vlan 7", "tcp[13", "((((", "port 80 or", "host ::ffff:10.0.0.1",
		"ip[0] ^ 1 ^ 2 = 3", "net 10.0.0.0 mask 255.255.0.0", "ether src 0200.0000.000a", "\\tcp", "!!!tcp"} {
		f.Add(e)
	}
	frames, _ := buildFrames(f)
	opts := Options{Ctx: asm.R6, PacketStart: asm.R7, PacketEnd: asm.R8, Result: asm.R0, ResultLabel: "out",
		Working: [4]asm.Register{asm.R2, asm.R3, asm.R4, asm.R5}}
	f.Fuzz(func(t *testing.T, expr string) {
		// A typed expression must not stall the agent either.
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("Compile(%q) and Instructions took %v", expr, d)
			}
		}()
		flt, err := Compile(expr)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Compile(%q): error %T is not an *Error: %v", expr, err, err)
			}
			return
		}
		if _, err := flt.Instructions(opts); err != nil {
			t.Fatalf("Compile(%q) accepted, but to eBPF: %v", expr, err)
		}
		if flt.MatchesAll() {
			return
		}
		vm, err := bpf.NewVM(flt.CBPF())
		if err != nil {
			t.Fatalf("Compile(%q): VM rejects the cBPF: %v", expr, err)
		}
		for _, fr := range frames[:4] {
			if _, err := vm.Run(fr); err != nil {
				t.Fatalf("Compile(%q): VM: %v", expr, err)
			}
		}
	})
}
