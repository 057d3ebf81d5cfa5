package hop

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"testing"
	"time"
)

// AppendJSON writes what encoding/json writes, for records that use every
// field, none, and strings encoding/json escapes.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	full := fullRequest()
	odd := full
	odd.Node = "nœud <a> & \"b\"\\\n\u2028"
	odd.Time = time.Unix(1700000000, 0).In(time.FixedZone("x", 5*3600+1800))
	odd.Hops = []Hop{{FromIface: "eth\t0"}}
	odd.Path = []Point{{Iface: "é"}}
	emptyHops := Request{Hops: []Hop{}}
	for name, r := range map[string]Request{"full": full, "zero": {}, "odd strings": odd, "empty hops": emptyHops} {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON([]byte("prefix")); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("%s:\n got %s\nwant prefix%s", name, got, want)
		}
	}
}

// fullRequest is a record that uses every field.
func fullRequest() Request {
	return Request{
		TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331", TraceSource: "traceparent",
		Kind: KindNameRequest, SrcAddr: netip.MustParseAddr("10.1.0.2"), DstAddr: netip.MustParseAddr("fd00::2"),
		SrcPort: 40000, DstPort: 80, Proto: 6, Seq: 4294967295,
		Time: time.Unix(1700000000, 123456789).UTC(), Node: "node-a",
		Hops: []Hop{
			{FromIface: "lxc1", ToIface: "vxlan0", Direction: Out, LatencyNs: 4500, FromPod: "shop/web-0"},
			{FromIface: "vxlan0", ToIface: "eth0", Direction: Out, LatencyNs: -3, FromNode: "a", ToNode: "b", ToPod: "x/y"},
		},
		Path: []Point{
			{Iface: "lxc1", IfIndex: 7, Kind: "veth", Pod: "shop/web-0", Hook: "ingress", TimeNs: 1e18, Seq: 1, Len: 100},
			{Iface: "eth0", IfIndex: 2, Hook: "egress", TimeNs: 5, Tunneled: true, Seq: 1, Len: 1448},
		},
		BootID: "5c0ffee0-1234", ClockOffsetNs: -1234567890123, ClockSync: true,
	}
}
