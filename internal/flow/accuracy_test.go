package flow

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestAccuracyNames(t *testing.T) {
	for a, want := range map[Accuracy]string{Exact: "exact", Decoded: "decoded", Estimated: "estimated"} {
		if a.String() != want {
			t.Errorf("%d: %s, want %s", a, a, want)
		}
		if got, err := ParseAccuracy(want); got != a || err != nil {
			t.Errorf("ParseAccuracy(%q) = %v, %v", want, got, err)
		}
		b, err := json.Marshal(struct{ A Accuracy }{a})
		if err != nil || string(b) != `{"A":"`+want+`"}` {
			t.Errorf("json.Marshal: %s, %v", b, err)
		}
		var back struct{ A Accuracy }
		if err := json.Unmarshal(b, &back); err != nil || back.A != a {
			t.Errorf("json.Unmarshal(%s): %v, %v", b, back.A, err)
		}
	}
	var zero Accuracy
	if zero != Exact {
		t.Error("the zero Accuracy is not Exact: records of producers that do not set it would not be exact")
	}
	for _, bad := range []string{"", "Exact", "estimate", "0"} {
		if _, err := ParseAccuracy(bad); err == nil {
			t.Errorf("ParseAccuracy(%q): no error", bad)
		}
	}
	if _, err := json.Marshal(Accuracy(7)); err == nil {
		t.Error("an accuracy without a name marshals")
	}
}

// TestJSONAccuracyContract: accuracy is always written; the bounds and
// their confidence only for estimates, and then exactly as set.
func TestJSONAccuracyContract(t *testing.T) {
	r := Record{Key: Key{EtherType: EtherTypeIPv4, Proto: 17}, Packets: 120, Bytes: 9000}
	for _, c := range []struct {
		acc  Accuracy
		want []string
		not  []string
	}{
		{Exact, []string{`"accuracy":"exact"`}, []string{"max_error", "error_confidence"}},
		{Decoded, []string{`"accuracy":"decoded"`}, []string{"max_error", "error_confidence"}},
		{Estimated, []string{`"accuracy":"estimated","max_error_packets":18,"max_error_bytes":1700,"error_confidence":0.9816843611112658,`}, nil},
	} {
		r.Accuracy = c.acc
		if c.acc == Estimated {
			r.MaxErrorPackets, r.MaxErrorBytes, r.ErrorConfidence = 18, 1700, -math.Expm1(-4)
		}
		js := string(AppendJSON(nil, &r))
		if !json.Valid([]byte(js)) {
			t.Fatalf("%s: invalid JSON %s", c.acc, js)
		}
		for _, w := range c.want {
			if !strings.Contains(js, w) {
				t.Errorf("%s: no %s in %s", c.acc, w, js)
			}
		}
		for _, n := range c.not {
			if strings.Contains(js, n) {
				t.Errorf("%s: %s in %s", c.acc, n, js)
			}
		}
		var back Record
		if err := json.Unmarshal([]byte(js), &back); err != nil || !reflect.DeepEqual(back, r) {
			t.Errorf("%s: read back %+v, %v", c.acc, back, err)
		}
	}
	r.ErrorConfidence = math.NaN()
	if js := AppendJSON(nil, &r); !json.Valid(js) {
		t.Errorf("NaN confidence: invalid JSON %s", js)
	}
}

func TestErrorSum(t *testing.T) {
	var s ErrorSum
	if s.Accuracy != Exact || s.Confidence() != 1 {
		t.Fatalf("empty sum: %+v, confidence %v", s, s.Confidence())
	}
	s.AddRecord(&Record{Packets: 5})
	s.AddRecord(&Record{Accuracy: Decoded, Packets: 7})
	if s.Accuracy != Decoded || s.MaxErrorPackets != 0 || s.Confidence() != 1 {
		t.Fatalf("exact + decoded: %+v, confidence %v", s, s.Confidence())
	}
	c := -math.Expm1(-4) // 0.98168...
	s.AddRecord(&Record{Accuracy: Estimated, MaxErrorPackets: 18, MaxErrorBytes: 1700, ErrorConfidence: c})
	if s.Accuracy != Estimated || s.MaxErrorPackets != 18 || s.MaxErrorBytes != 1700 || s.Confidence() != c {
		t.Fatalf("with one estimate: %+v, confidence %v, want %v", s, s.Confidence(), c)
	}
	// Bounds of a record that is not an estimate are not read.
	s.Add(Exact, 1000, 1000, 0)
	if s.MaxErrorPackets != 18 || s.Confidence() != c {
		t.Fatalf("an exact record's stray bounds counted: %+v", s)
	}
	s.AddRecord(&Record{Accuracy: Estimated, MaxErrorPackets: 2, MaxErrorBytes: 300, ErrorConfidence: 0.99})
	if want := 1 - (1 - c) - 0.01; s.MaxErrorPackets != 20 || s.MaxErrorBytes != 2000 || math.Abs(s.Confidence()-want) > 1e-15 {
		t.Fatalf("two estimates: %+v, confidence %v, want %v", s, s.Confidence(), want)
	}

	// The union bound stops at 0, and the bounds at the largest uint64.
	var low ErrorSum
	for range 100 {
		low.Add(Estimated, math.MaxUint64/3, 1, 0.9)
	}
	if low.Confidence() != 0 || low.MaxErrorPackets != math.MaxUint64 || low.MaxErrorBytes != 100 {
		t.Fatalf("100 estimates at 0.9: %+v, confidence %v", low, low.Confidence())
	}
	for _, bad := range []float64{math.NaN(), -0.5, 2} {
		var b ErrorSum
		b.Add(Estimated, 1, 1, bad)
		if b.Confidence() != 0 {
			t.Errorf("confidence %v counts as %v, want 0", bad, b.Confidence())
		}
	}

	// Merging in any order gives the same sum, to the last bit.
	confs := []float64{0.9, 0.99, 0.999, c, 0.95, 0.5}
	var fwd, rev ErrorSum
	for i := range confs {
		fwd.Add(Estimated, 1, 1, confs[i])
		var one ErrorSum
		one.Add(Estimated, 1, 1, confs[len(confs)-1-i])
		rev.Merge(&one)
	}
	if fwd != rev {
		t.Errorf("order changed the sum: %+v, %+v", fwd, rev)
	}
}
