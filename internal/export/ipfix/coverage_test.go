package ipfix

import (
	"fmt"
	"slices"
	"testing"

	"loupe/internal/flow"
	"loupe/internal/flow/flowtest"
)

// decodeOne encodes r alone, with the templates, and decodes it with the
// test decoder: element name -> value.
func decodeOne(t testing.TB, r *flow.Record) flowtest.Parts {
	t.Helper()
	e := newEncoder(1, DefaultMTUUDP, testPEN)
	e.prepare([]flow.Record{*r})
	msg, _, n := e.message([]flow.Record{*r}, true, 0, 0)
	if n != 1 || e.head == nil {
		t.Fatalf("encoded %d records of 1, templates riding %v", n, e.head != nil)
	}
	m, err := newDecoder().decode(msg)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.records) != 1 {
		t.Fatalf("decoded %d records", len(m.records))
	}
	return flowtest.Parts(m.records[0].fields)
}

// ieNames lists the names of the elements the registry gives a field.
func ieNames(f *flow.Field) []string {
	var out []string
	for _, ie := range f.Wire.IPFIX {
		if !slices.Contains(out, ie.Name) {
			out = append(out, ie.Name)
		}
	}
	return out
}

// TestCoverage is the IPFIX encoder's field-coverage test: every field
// travels in every template whose records it applies to, in the elements
// flow's registry gives it, and the templates carry no other element.
func TestCoverage(t *testing.T) {
	flowtest.Coverage{
		Encode: decodeOne,
		Excluded: map[string]string{
			"iface": "interfaceName is variable-length, and every record has a fixed layout: the ifindex " +
				"(ingressInterface/egressInterface) and the observation domain identify the interface",
		},
		IDs: ieNames,
	}.Check(t)
}

// TestElementsAreTheRegistrys checks each element the registry names
// against the templates: same ID, same name, same PEN space, and every
// element of a template belongs to a field. The test decoder's own table
// of IANA numbers (decode_test.go) ties names to IDs.
func TestElementsAreTheRegistrys(t *testing.T) {
	inTemplates := map[string]Element{}
	// The base templates, and an extension template with every part.
	for _, tpl := range append(templates(), extensionTemplate(2*shapes-1, 1<<len(extParts)-1)) {
		for _, e := range tpl.fields {
			inTemplates[fmt.Sprintf("%v/%d", e.Enterprise, e.ID)] = e
		}
	}
	used := map[string]bool{}
	for _, f := range flow.Fields() {
		for _, ie := range f.Wire.IPFIX {
			k := fmt.Sprintf("%v/%d", ie.Enterprise, ie.ID)
			used[k] = true
			e, ok := inTemplates[k]
			switch {
			case !ok:
				t.Errorf("field %s: element %s (%s) is in no template", f.Name, k, ie.Name)
			case e.Name != ie.Name:
				t.Errorf("field %s: element %s is %s in the templates, %s in the registry", f.Name, k, e.Name, ie.Name)
			}
			pen := uint32(0)
			if ie.Enterprise {
				pen = testPEN
			}
			if name := fieldNames[[2]uint32{pen, uint32(ie.ID)}]; name != ie.Name {
				t.Errorf("field %s: element %d of PEN %d is %q, the registry says %q", f.Name, ie.ID, pen, name, ie.Name)
			}
		}
	}
	for k, e := range inTemplates {
		if !used[k] {
			t.Errorf("template element %s (%s) carries no field of the registry", k, e.Name)
		}
	}
}

// TestMessagesNeverExceedTheMTU encodes every shape of record at the
// smallest MTU the client accepts, the defaults and the largest: no
// message is larger, and every message holds a record, the first one
// with the templates where they ride; where they do not, each message of
// templates alone fits too.
func TestMessagesNeverExceedTheMTU(t *testing.T) {
	if low := minMaxLen(DefaultEnterpriseNumber); low > minMessageLen {
		t.Fatalf("a template set, or the largest record, takes %d bytes, over the %d-byte minimum MTU", low, minMessageLen)
	}
	var recs []flow.Record
	for range 50 {
		for _, b := range flowtest.Bases() {
			recs = append(recs, b.Rec)
		}
	}
	for _, mtu := range []int{minMessageLen, DefaultMTUUDP, DefaultMTUTCP, maxMessageLen} {
		e := newEncoder(1, mtu, DefaultEnterpriseNumber)
		if (e.head == nil) != (mtu == minMessageLen) {
			t.Errorf("MTU %d: templates ride %v", mtu, e.head != nil)
		}
		// With the extension templates of every base, which go where the
		// others do.
		e.prepare(recs)
		for i, body := range e.tplMsgs {
			if msg := e.templatesOnly(body, 0, 0); len(msg) > mtu {
				t.Fatalf("MTU %d: template message %d of %d bytes", mtu, i, len(msg))
			}
		}
		first := e.head != nil
		for rest := recs; len(rest) > 0; first = false {
			msg, taken, held := e.message(rest, first, 0, 0)
			if len(msg) > mtu || held == 0 || taken != held {
				t.Fatalf("MTU %d: message of %d bytes holding %d records of %d taken", mtu, len(msg), held, taken)
			}
			rest = rest[taken:]
		}
	}
}
