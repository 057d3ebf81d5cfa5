package tunnel

import "testing"

func TestTypeNames(t *testing.T) {
	for typ, want := range map[Type]string{None: "", VXLAN: "vxlan", Geneve: "geneve", GRE: "gre", IPIP: "ipip", 9: "unknown"} {
		if got := typ.String(); got != want {
			t.Errorf("Type(%d).String() = %q, want %q", typ, got, want)
		}
	}
}
