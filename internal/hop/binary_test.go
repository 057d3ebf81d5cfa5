package hop

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// A record read back from its binary form is the record written, for
// records that use every field, none, ids that are not lowercase hex,
// IPv6 with a zone, short and long, and empty against nil hops and paths; and it prints
// the same JSON (what `loupe latency` shows).
func TestBinaryRoundTrip(t *testing.T) {
	full := fullRequest()
	odd := full
	odd.TraceID, odd.SpanID = "0AF7651916CD43DD8448EB211C80319C", "not hex at all!!"
	odd.SrcAddr = netip.MustParseAddr("fe80::1%eth0")
	odd.DstAddr = netip.MustParseAddr("fe80::2%" + strings.Repeat("z", 200)) // a length of two bytes
	odd.Node = "nœud <a> & \"b\""
	odd.Hops, odd.Path = []Hop{}, []Point{}
	untraced := full
	untraced.TraceID, untraced.SpanID, untraced.TraceSource = "", "", ""
	// As the matcher makes them: the hops are the path's, and are not
	// written.
	matched := untraced
	matched.Hops = Hops(matched.Path)
	for name, r := range map[string]Request{"full": full, "zero": {}, "odd": odd, "untraced": untraced, "matched": matched} {
		b := r.AppendBinary([]byte("prefix"))
		got, err := DecodeBinary(b[len("prefix"):])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(*got, r) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, *got, r)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(&r)
		if !bytes.Equal(gj, wj) {
			t.Errorf("%s: JSON\n got %s\nwant %s", name, gj, wj)
		}
	}
	b := full.AppendBinary(nil)
	if js, _ := json.Marshal(&full); len(b)*2 > len(js) {
		t.Errorf("binary form %d bytes, JSON %d: want under half", len(b), len(js))
	}
	if m, u := len(matched.AppendBinary(nil)), len(untraced.AppendBinary(nil)); m+len(matched.Hops)*20 > u {
		t.Errorf("hops of the path: %d bytes, against %d written out", m, u)
	}
	// Every cut of a record, and a byte past its end, is an error, never
	// a panic or a record.
	for n := range len(b) {
		if r, err := DecodeBinary(b[:n]); err == nil {
			t.Fatalf("cut at %d of %d bytes: decoded %+v", n, len(b), r)
		}
	}
	if _, err := DecodeBinary(append(b, 0)); err == nil {
		t.Error("a byte past the end: no error")
	}
}

// A length that claims more than the record holds is an error, not an
// allocation of that size.
func TestBinaryHugeLength(t *testing.T) {
	b := []byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f}
	if _, err := DecodeBinary(b); err == nil {
		t.Error("no error")
	}
}

func FuzzDecodeBinary(f *testing.F) {
	r := Request{TraceID: "0af7651916cd43dd8448eb211c80319c", Kind: "request", Path: []Point{{Iface: "a"}}}
	f.Add(r.AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeBinary(b)
		if err != nil {
			return
		}
		// What decodes encodes back to itself.
		again, err := DecodeBinary(r.AppendBinary(nil))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%+v: re-decoded %+v, %v", r, again, err)
		}
	})
}
