package flowtest

import (
	"fmt"
	"strings"
	"testing"

	"loupe/internal/flow"
)

// recorder collects what a check reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

// valuesWithout is an encoder that carries every field but the named ones.
func valuesWithout(skip ...string) func(testing.TB, *flow.Record) Parts {
	return func(_ testing.TB, r *flow.Record) Parts {
		p := Values(r)
		for _, s := range skip {
			delete(p, s)
		}
		return p
	}
}

func TestCheckCatchesAMissingField(t *testing.T) {
	rec := &recorder{TB: t}
	Coverage{Encode: valuesWithout("vlan_id")}.Check(rec)
	// One error per base record: vlan_id applies to every shape.
	if len(rec.errs) != len(Bases()) || !strings.Contains(rec.errs[0], "field vlan_id is not encoded") {
		t.Fatalf("errors %q", rec.errs)
	}

	rec = &recorder{TB: t}
	Coverage{Encode: valuesWithout("vlan_id"), Excluded: map[string]string{"vlan_id": "not carried, for the test"}}.Check(rec)
	if len(rec.errs) != 0 {
		t.Fatalf("excluded field still reported: %q", rec.errs)
	}

	// A field excluded for one shape only is still checked in the others.
	rec = &recorder{TB: t}
	Coverage{Encode: valuesWithout("vlan_id"), Excluded: map[string]string{"vlan_id@arp": "for the test"}}.Check(rec)
	if len(rec.errs) != len(Bases())-1 {
		t.Fatalf("errors %q", rec.errs)
	}
}

func TestCheckRejectsBadExclusions(t *testing.T) {
	rec := &recorder{TB: t}
	Coverage{Encode: valuesWithout(), Excluded: map[string]string{"vlan": "typo", "dscp@ipx": "no such base", "dscp": " "}}.Check(rec)
	want := []string{`exclusion "vlan" names no field`, `exclusion "dscp@ipx" names no base record`, `exclusion "dscp" gives no reason`}
	for _, w := range want {
		found := false
		for _, e := range rec.errs {
			found = found || strings.Contains(e, w)
		}
		if !found {
			t.Errorf("no error %q in %q", w, rec.errs)
		}
	}
}

func TestCheckComparesWithTheRegistry(t *testing.T) {
	// The registry says dscp travels as "dscp"; this encoder calls it
	// "tos", and writes an extra part.
	enc := func(tb testing.TB, r *flow.Record) Parts {
		p := valuesWithout("dscp")(tb, r)
		p["tos"] = fmt.Sprint(r.DSCP)
		p["version"] = "1"
		return p
	}
	rec := &recorder{TB: t}
	Coverage{Encode: enc, IDs: func(f *flow.Field) []string { return []string{f.Name} }}.Check(rec)
	got := strings.Join(rec.errs, "\n")
	for _, w := range []string{`"dscp" never changes`, `writes "tos", which the registry gives no field`, `writes "version"`} {
		if !strings.Contains(got, w) {
			t.Errorf("no error %q in\n%s", w, got)
		}
	}
	rec = &recorder{TB: t}
	Coverage{Encode: valuesWithout(), IDs: func(f *flow.Field) []string { return []string{f.Name} }}.Check(rec)
	if len(rec.errs) != 0 {
		t.Errorf("a faithful encoder: %q", rec.errs)
	}
}

func TestBasesAreConsistentAndFull(t *testing.T) {
	for _, b := range Bases() {
		if !Consistent(&b.Rec) {
			t.Errorf("%s: a field that does not apply is set", b.Name)
		}
		for _, f := range flow.Fields() {
			enum := f.Type == flow.TypeDirection || f.Type == flow.TypeAccuracy // zero is a value
			measuredZero := f.Name == "retransmits"                             // a base says 0 is a value too
			if !enum && !measuredZero && f.AppliesTo(&b.Rec) && isZero(&f, &b.Rec) {
				t.Errorf("%s: %s applies but is zero", b.Name, f.Name)
			}
		}
	}
}
