package kafka

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"loupe/internal/export/kafka/flowpb"
	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
)

// protoName is the FlowRecord field that carries f: its JSON name, with
// the unit for times.
func protoName(f *flow.Field) string {
	if f.Type == flow.TypeTime {
		return f.Name + "_unix_nano"
	}
	return f.Name
}

// TestProtoNumbersAreTheRegistrys checks the schema against flow's
// registry: every field has the number the registry gives it, under its
// name, and the schema has no field the registry does not know.
func TestProtoNumbersAreTheRegistrys(t *testing.T) {
	fds := (&flowpb.FlowRecord{}).ProtoReflect().Descriptor().Fields()
	known := map[int]bool{}
	for _, f := range flow.Fields() {
		fd := fds.ByNumber(protowire.Number(f.Wire.Proto))
		switch {
		case fd == nil:
			t.Errorf("field %s: FlowRecord has no field %d", f.Name, f.Wire.Proto)
		case string(fd.Name()) != protoName(&f):
			t.Errorf("field %s: FlowRecord's field %d is %s, want %s", f.Name, f.Wire.Proto, fd.Name(), protoName(&f))
		}
		known[f.Wire.Proto] = true
	}
	for i := range fds.Len() {
		if fd := fds.Get(i); !known[int(fd.Number())] {
			t.Errorf("FlowRecord field %s (%d) is not in flow's registry", fd.Name(), fd.Number())
		}
	}
}

// protoParts splits a FlowRecord into its fields, by number; the values
// of a repeated field (a map's entries) are concatenated.
func protoParts(t testing.TB, b []byte) flowtest.Parts {
	t.Helper()
	p := flowtest.Parts{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(m))
		}
		p[fmt.Sprint(num)] += hex.EncodeToString(b[n : n+m]) // a map's entries repeat the field
		b = b[n+m:]
	}
	return p
}

// TestProtoCoverage is the protobuf format's field-coverage test, which
// also checks that each field travels under its registry number.
func TestProtoCoverage(t *testing.T) {
	flowtest.Coverage{
		Encode: func(t testing.TB, r *flow.Record) flowtest.Parts { return protoParts(t, AppendProto(nil, r)) },
		IDs:    func(f *flow.Field) []string { return []string{fmt.Sprint(f.Wire.Proto)} },
	}.Check(t)
}

// TestJSONFormatCoverage is the field-coverage test of format=json, through
// the encoder the client picks for it.
func TestJSONFormatCoverage(t *testing.T) {
	c, err := New("kafka://127.0.0.1:1/flows?format=json", Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	flowtest.Coverage{
		Encode: func(t testing.TB, r *flow.Record) flowtest.Parts {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(c.encode(nil, r), &m); err != nil {
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

// TestKeyCoverage: the Kafka record key carries every field of the flow
// key, so that the records of two flows never share a key.
func TestKeyCoverage(t *testing.T) {
	excluded := map[string]string{}
	for _, f := range flow.Fields() {
		if !f.Key {
			excluded[f.Name] = "not part of the flow key"
		}
	}
	flowtest.Coverage{
		Encode: func(_ testing.TB, r *flow.Record) flowtest.Parts {
			return flowtest.Parts{"key": hex.EncodeToString(AppendKey(nil, &r.Key))}
		},
		Excluded: excluded,
	}.Check(t)
}
