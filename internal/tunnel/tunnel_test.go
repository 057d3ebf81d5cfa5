package tunnel

import "testing"

func TestTypeNames(t *testing.T) {
	for typ, want := range map[Type]string{None: "", VXLAN: "vxlan", Geneve: "geneve", GRE: "gre", IPIP: "ipip", 9: "unknown"} {
		if got := typ.String(); got != want {
			t.Errorf("Type(%d).String() = %q, want %q", typ, got, want)
		}
		if got, err := ParseType(want); typ >= VXLAN && typ <= IPIP && (err != nil || got != typ) {
			t.Errorf("ParseType(%q) = %v, %v; want %v", want, got, err, typ)
		}
	}
	for _, bad := range []string{"", "unknown", "VXLAN", "none"} {
		if _, err := ParseType(bad); err == nil {
			t.Errorf("ParseType(%q): no error", bad)
		}
	}
}
