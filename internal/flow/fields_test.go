package flow_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
)

// TestTableCoversEveryGoField fails when Record or Key gain a field that
// the table does not define: every Go field must be changed by exactly one
// field of the table (through its accessors), and every table field must
// change one Go field. Has, the presence of the fields present only where
// measured, is the one exception: a field with a Presence changes its own
// bit of it, and nothing else of it, when it was absent.
func TestTableCoversEveryGoField(t *testing.T) {
	owner := map[string]string{} // Go field -> table field
	bits := map[flow.Presence]string{}
	for _, f := range flow.Fields() {
		if f.Presence != 0 {
			if f.Presence&(f.Presence-1) != 0 {
				t.Errorf("field %s: presence %#x is not one bit", f.Name, f.Presence)
			}
			if o, ok := bits[f.Presence]; ok {
				t.Errorf("presence bit %#x is both %s's and %s's", f.Presence, o, f.Name)
			}
			bits[f.Presence] = f.Name
			if !f.Optional {
				t.Errorf("field %s: present only where measured, yet written where absent", f.Name)
			}
		}
		for _, b := range flowtest.Bases() {
			r := b.Rec
			v := r
			flowtest.Vary(&f, &v)
			if f.Presence != 0 && v.Has != r.Has|f.Presence {
				t.Errorf("field %s (base %s): presence %#x after Vary, want %#x", f.Name, b.Name, v.Has, r.Has|f.Presence)
			} else if f.Presence == 0 && v.Has != r.Has {
				t.Errorf("field %s (base %s) changes the presence of others", f.Name, b.Name)
			}
			r.Has, v.Has = 0, 0
			changed := changedGoFields(reflect.ValueOf(r), reflect.ValueOf(v), "")
			if len(changed) != 1 {
				t.Errorf("field %s (base %s) changes Go fields %v, want exactly one", f.Name, b.Name, changed)
				continue
			}
			if o, ok := owner[changed[0]]; ok && o != f.Name {
				t.Errorf("Go field %s belongs to both %s and %s", changed[0], o, f.Name)
			}
			owner[changed[0]] = f.Name
		}
	}
	owner["Has"] = "the presence of the fields present only where measured"
	for _, name := range goFields(reflect.TypeFor[flow.Record](), "") {
		if _, ok := owner[name]; !ok {
			t.Errorf("Go field %s has no row in the field table (internal/flow/fields.go): add one", name)
		}
	}
}

// goFields lists the leaf fields of a struct type, Key's fields flattened.
func goFields(typ reflect.Type, prefix string) []string {
	var out []string
	for f := range typ.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, goFields(f.Type, prefix+f.Name+".")...)
			continue
		}
		if t, ok := flowStruct(f.Type); ok {
			out = append(out, goFields(t, prefix+f.Name+".")...)
			continue
		}
		out = append(out, prefix+f.Name)
	}
	return out
}

// flowStruct reports whether a field of type t is a struct of this package
// (or a pointer to one) whose fields are fields of the table each: the
// Kubernetes names, K8s and its ends.
func flowStruct(t reflect.Type) (reflect.Type, bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t, t.Kind() == reflect.Struct && t.PkgPath() == reflect.TypeFor[flow.Record]().PkgPath()
}

// deref is v, a struct of type t or a pointer to one, as a struct: the
// zero struct for nil.
func deref(v reflect.Value, t reflect.Type) reflect.Value {
	if v.Kind() != reflect.Pointer {
		return v
	}
	if v.IsNil() {
		return reflect.Zero(t)
	}
	return v.Elem()
}

func changedGoFields(a, b reflect.Value, prefix string) []string {
	var out []string
	for i := range a.NumField() {
		sf := a.Type().Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			out = append(out, changedGoFields(a.Field(i), b.Field(i), prefix+sf.Name+".")...)
			continue
		}
		if t, ok := flowStruct(sf.Type); ok {
			out = append(out, changedGoFields(deref(a.Field(i), t), deref(b.Field(i), t), prefix+sf.Name+".")...)
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, prefix+sf.Name)
		}
	}
	return out
}

// TestTableIsWellFormed checks each row's accessors against its type.
func TestTableIsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range flow.Fields() {
		if f.Name == "" || strings.ToLower(f.Name) != f.Name || strings.ContainsAny(f.Name, " .-") {
			t.Errorf("field %q: want a lowercase snake_case name", f.Name)
		}
		if seen[f.Name] {
			t.Errorf("field %s defined twice", f.Name)
		}
		seen[f.Name] = true
		if f.Doc == "" {
			t.Errorf("field %s: no meaning", f.Name)
		}
		ok := false
		switch f.Type {
		case flow.TypeUint:
			ok = f.Uint != nil && f.SetUint != nil && f.Bits > 0 && f.Bits <= 64
		case flow.TypeDirection:
			ok = f.Uint != nil && f.SetUint != nil
		case flow.TypeString:
			ok = f.Str != nil
		case flow.TypeMAC:
			ok = f.MAC != nil
		case flow.TypeAddr:
			ok = f.Addr != nil
		case flow.TypeTime:
			ok = f.Time != nil
		case flow.TypeAccuracy:
			ok = f.Uint != nil && f.SetUint != nil
		case flow.TypeFloat:
			ok = f.Float != nil
		case flow.TypeEnum:
			ok = f.Uint != nil && f.SetUint != nil && f.Enum != nil && f.Bits > 0 && f.Bits <= 16
		case flow.TypeIP:
			ok = f.IP != nil
		case flow.TypeCounts:
			ok = f.Counts != nil
		}
		if !ok {
			t.Errorf("field %s: type %v without its accessors", f.Name, f.Type)
		}
		if f.Counter != (f.Wire.Metric != nil) {
			t.Errorf("field %s: counter %v but metric %+v: every counter has its metrics, and only counters", f.Name, f.Counter, f.Wire.Metric)
		}
		if f.Counter && (f.Type != flow.TypeUint || f.Bits != 64 || f.Key) {
			t.Errorf("field %s: a counter is a 64-bit integer outside the key", f.Name)
		}
		if f.Optional && f.Applies == nil {
			t.Errorf("field %s: optional, but applies to every record: it would never be left out", f.Name)
		}
	}
}

func TestCountersFollowFields(t *testing.T) {
	cf := flow.CounterFields()
	if len(cf) != flow.NumCounters {
		t.Fatalf("%d counter fields, NumCounters is %d", len(cf), flow.NumCounters)
	}
	r := flowtest.Bases()[0].Rec
	got := r.Counters()
	for i, f := range cf {
		if got[i] != f.Uint(&r) {
			t.Errorf("Counters()[%d] = %d, field %s is %d", i, got[i], f.Name, f.Uint(&r))
		}
	}
}

// TestRegistryHasNoCollisions checks every column of the registry: no two
// fields share an identifier (IPFIX: but the two halves of icmpTypeCode*),
// and none takes a reserved or withdrawn one.
func TestRegistryHasNoCollisions(t *testing.T) {
	ipfix := map[string]string{}
	proto := map[string]string{}
	store := map[uint32]string{}
	otlp := map[string]string{}
	metrics := map[string]string{}
	ent := map[uint16]flow.EnterpriseElement{}
	for _, e := range flow.EnterpriseElements() {
		if _, dup := ent[e.ID]; dup {
			t.Errorf("enterprise element %d listed twice", e.ID)
		}
		ent[e.ID] = e
	}
	claim := func(m map[string]string, id, field, column string) {
		if o, ok := m[id]; ok && o != field {
			t.Errorf("%s %s is taken by both %s and %s", column, id, o, field)
		}
		m[id] = field
	}
	usedEnt := map[uint16]bool{}
	for _, f := range flow.Fields() {
		w := f.Wire
		for _, ie := range w.IPFIX {
			claim(ipfix, fmt.Sprintf("%v/%d/%s", ie.Enterprise, ie.ID, ie.Part), f.Name, "IPFIX element")
			if ie.Enterprise {
				e, ok := ent[ie.ID]
				switch {
				case !ok:
					t.Errorf("field %s: enterprise element %d is not in EnterpriseElements", f.Name, ie.ID)
				case e.Status != flow.Sent || e.Name != ie.Name:
					t.Errorf("field %s: enterprise element %d is %q (%v), the field calls it %q", f.Name, ie.ID, e.Name, e.Status, ie.Name)
				}
				usedEnt[ie.ID] = true
			}
		}
		if w.Proto <= 0 || w.Proto >= 19000 && w.Proto <= 19999 || w.Proto > 1<<29-1 {
			t.Errorf("field %s: protobuf field number %d is not valid", f.Name, w.Proto)
		}
		for _, r := range flow.ReservedProtoRanges() {
			if w.Proto >= r.From && w.Proto <= r.To {
				t.Errorf("field %s: protobuf field number %d is in %d-%d, kept for %s", f.Name, w.Proto, r.From, r.To, r.For)
			}
		}
		claim(proto, fmt.Sprint(w.Proto), f.Name, "protobuf field number")
		if w.Store == 0 || w.Store >= flow.StoreDictionaryKinds {
			t.Errorf("field %s: store column kind %d outside 1-%d", f.Name, w.Store, flow.StoreDictionaryKinds-1)
		}
		if o, ok := store[w.Store]; ok {
			t.Errorf("store column kind %d is taken by both %s and %s", w.Store, o, f.Name)
		}
		store[w.Store] = f.Name
		if len(w.OTLP) == 0 {
			t.Errorf("field %s: no OTLP attribute", f.Name)
		}
		for _, a := range w.OTLP {
			claim(otlp, a, f.Name, "OTLP attribute")
		}
		if m := w.Metric; m != nil {
			claim(metrics, m.Prom, f.Name, "Prometheus metric")
			claim(metrics, m.OTLP, f.Name, "OTLP metric")
		}
	}
	for id, e := range ent {
		if e.Status == flow.Sent && !usedEnt[id] {
			t.Errorf("enterprise element %d (%s) is marked sent but no field uses it", id, e.Name)
		}
	}
}

// TestEnterpriseIDsNeverReused pins the meaning of every enterprise
// element ID ever assigned: an ID may move from reserved to sent, or to
// withdrawn, but never to another name.
func TestEnterpriseIDsNeverReused(t *testing.T) {
	pinned := map[uint16]string{
		1: "loupeSamplingRate", 2: "loupeDroppedPacketCount", 3: "loupeDroppedOctetCount",
		4: "loupeDropReason", 5: "loupeSmoothedRttMicroseconds", 6: "loupeSegmentDeltaCount", 7: "loupeWireOctetDeltaCount",
		8: "loupeAggregatePrefix", 9: "loupeAccuracy", 10: "loupeMaxErrorPacketDeltaCount", 11: "loupeMaxErrorOctetDeltaCount",
		12: "loupeErrorConfidence",
	}
	got := map[uint16]string{}
	for i, e := range flow.EnterpriseElements() {
		got[e.ID] = e.Name
		if i > 0 && e.ID <= flow.EnterpriseElements()[i-1].ID {
			t.Errorf("enterprise elements out of ID order at %d", e.ID)
		}
	}
	for id, name := range pinned {
		if got[id] != name {
			t.Errorf("enterprise element %d is %q, was %q: an ID never changes meaning and is never dropped from the list", id, got[id], name)
		}
	}
}

// TestJSONCoverage runs the field-coverage test on the JSON form, and
// checks that the JSON names are the table's.
func TestJSONCoverage(t *testing.T) {
	flowtest.Coverage{
		Encode: func(t testing.TB, r *flow.Record) flowtest.Parts {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(flow.AppendJSON(nil, r), &m); err != nil {
				t.Fatal(err)
			}
			p := flowtest.Parts{}
			for k, v := range m {
				p[k] = string(v)
			}
			return p
		},
		IDs: func(f *flow.Field) []string { return []string{f.Name} },
	}.Check(t)
}

// TestJSONRoundTripEveryField decodes what AppendJSON wrote back into the
// same record, for every base and every variation of a field that leaves
// a record the datapath can produce (an address in a non-IP flow is not
// written).
func TestJSONRoundTripEveryField(t *testing.T) {
	for _, b := range flowtest.Bases() {
		recs := []flow.Record{b.Rec}
		for _, f := range flow.Fields() {
			v := b.Rec
			flowtest.Vary(&f, &v)
			if flowtest.Consistent(&v) {
				recs = append(recs, v)
			}
		}
		for _, r := range recs {
			js := flow.AppendJSON(nil, &r)
			var back flow.Record
			if err := json.Unmarshal(js, &back); err != nil {
				t.Fatalf("%s: decode %s: %v", b.Name, js, err)
			}
			if d := flowtest.Diff(flowtest.Values(&r), flowtest.Values(&back)); len(d) > 0 {
				t.Errorf("%s: %s decodes with different %v", b.Name, js, d)
			}
		}
	}
}

// TestJSONReadsOtherVersions: fields an older agent did not write are
// zero, fields a newer one writes are ignored, and values out of a
// field's range are errors.
func TestJSONReadsOtherVersions(t *testing.T) {
	old := `{"iface":"eth0","ifindex":2,"direction":"egress","eth_type":2048,"src_mac":"02:00:00:00:00:01","dst_mac":"02:00:00:00:00:02",` +
		`"proto":6,"src_addr":"10.0.0.1","dst_addr":"10.0.0.2","src_port":1,"dst_port":2,"packets":3,"bytes":180,"tcp_flags":18,` +
		`"dscp":0,"sampling":1,"first_seen":"2026-11-21T09:30:00.123456789Z","last_seen":"2026-11-21T09:30:01.000000000Z","future_field":[1,2]}`
	var r flow.Record
	if err := json.Unmarshal([]byte(old), &r); err != nil {
		t.Fatal(err)
	}
	if r.Packets != 3 || r.Bytes != 180 || r.Segments != 0 || r.WireBytes != 0 || r.VlanID != 0 || r.Direction != flow.Egress || r.SrcIP().String() != "10.0.0.1" ||
		r.Accuracy != flow.Exact || r.MaxErrorPackets != 0 || r.ErrorConfidence != 0 {
		t.Errorf("decoded %+v", r)
	}
	for _, bad := range []string{`{"vlan_id":4096}`, `{"dscp":64}`, `{"src_port":65536}`, `{"direction":"up"}`, `{"src_mac":"x"}`, `{"packets":-1}`, `{"first_seen":"yesterday"}`,
		`{"accuracy":"approximate"}`, `{"accuracy":2}`, `{"error_confidence":"high"}`, `{"max_error_bytes":-5}`} {
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestREADMEListsEveryField keeps the README's JSON table equal to the
// table, row for row. LOUPE_PRINT_DOC_TABLE=1 prints it.
func TestREADMEListsEveryField(t *testing.T) {
	rows := []string{"| field | type | meaning |", "| --- | --- | --- |"}
	for _, f := range flow.Fields() {
		rows = append(rows, fmt.Sprintf("| `%s` | %s | %s |", f.Name, docType(&f), f.Doc))
	}
	table := strings.Join(rows, "\n")
	if os.Getenv("LOUPE_PRINT_DOC_TABLE") == "1" {
		fmt.Println(table)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), table+"\n\n") {
		t.Fatalf("README.md does not hold the JSON field table; it should read:\n%s", table)
	}
}

func docType(f *flow.Field) string {
	switch f.Type {
	case flow.TypeUint:
		if f.Unit != "" {
			return "integer, " + f.Unit
		}
		return "integer"
	case flow.TypeTime:
		return "string (time)"
	case flow.TypeMAC, flow.TypeAddr:
		return "string (" + f.Type.String() + ")"
	case flow.TypeFloat:
		return "number"
	case flow.TypeIP:
		return "string (IP address)"
	case flow.TypeCounts:
		return "object"
	}
	return "string"
}

func TestProtocols(t *testing.T) {
	for s, want := range map[string]uint8{"tcp": 6, "TCP": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "ipv6-icmp": 58, "sctp": 132,
		"udplite": 136, "gre": 47, "ospf": 89, "ospfigp": 89, "0": 0, "255": 255, " 47 ": 47} {
		if got, err := flow.ParseProto(s); err != nil || got != want {
			t.Errorf("ParseProto(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "256", "-1", "tcpx", "0x6"} {
		if _, err := flow.ParseProto(s); err == nil {
			t.Errorf("ParseProto(%q): no error", s)
		}
	}
	seen := map[string]bool{}
	for _, p := range flow.Protocols() {
		for _, n := range []string{p.Name, p.Keyword} {
			if got, err := flow.ParseProto(n); err != nil || got != p.Number {
				t.Errorf("ParseProto(%q) = %d, %v; want %d", n, got, err, p.Number)
			}
		}
		if seen[p.Name] && p.Name != p.Keyword {
			t.Errorf("name %s used twice", p.Name)
		}
		seen[p.Name] = true
		if flow.ProtoName(p.Number) != p.Name || flow.ProtoKeyword(p.Number) != p.Keyword {
			t.Errorf("protocol %d: name %s keyword %s", p.Number, flow.ProtoName(p.Number), flow.ProtoKeyword(p.Number))
		}
	}
	if flow.ProtoName(253) != "253" || flow.ProtoKeyword(253) != "253" || flow.ProtoName(58) != "icmpv6" || flow.ProtoKeyword(58) != "ipv6-icmp" {
		t.Error("names of 253 and 58")
	}
	for _, c := range []struct {
		et    uint16
		proto uint8
		want  flow.PortKind
	}{
		{flow.EtherTypeIPv4, 6, flow.TransportPorts}, {flow.EtherTypeIPv6, 17, flow.TransportPorts},
		{flow.EtherTypeIPv4, 132, flow.TransportPorts}, {flow.EtherTypeIPv6, 136, flow.TransportPorts},
		{flow.EtherTypeIPv4, 1, flow.ICMPTypeCode}, {flow.EtherTypeIPv6, 58, flow.ICMPTypeCode},
		{flow.EtherTypeIPv6, 1, flow.NoPorts}, {flow.EtherTypeIPv4, 58, flow.NoPorts},
		{flow.EtherTypeIPv4, 47, flow.NoPorts}, {flow.EtherTypeARP, 6, flow.NoPorts},
	} {
		k := flow.Key{EtherType: c.et, Proto: c.proto}
		if got := k.PortKind(); got != c.want {
			t.Errorf("eth_type %#x proto %d: port kind %d, want %d", c.et, c.proto, got, c.want)
		}
	}
	if !slices.Equal([]bool{(&flow.Key{EtherType: flow.EtherTypeIPv4, Proto: 6}).IsTCP(), (&flow.Key{EtherType: flow.EtherTypeARP, Proto: 6}).IsTCP()}, []bool{true, false}) {
		t.Error("IsTCP")
	}
}

// TestAppendTimeIsTheLayout checks the hand-written time format against
// time.Time.AppendFormat, across the years a record can hold.
func TestAppendTimeIsTheLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{{}, time.Unix(0, 0), time.Unix(0, 1), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 21, 10, 0, 0, 5, time.FixedZone("x", 3600+1800))}
	for range 10000 {
		times = append(times, time.Unix(0, rng.Int64()).In(time.FixedZone("y", rng.IntN(50000)-25000)))
	}
	for _, tm := range times {
		if got, want := string(flow.AppendTime(nil, tm)), tm.UTC().Format(flow.TimeLayout); got != want {
			t.Fatalf("%v: %s, want %s", tm, got, want)
		}
	}
}
