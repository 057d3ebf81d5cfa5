package ipfix

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"loupe/internal/flow"
)

// docRow is the row docs/exporters/ipfix.md must hold for e.
func docRow(e Element) string {
	pen, sent := "0 (IANA)", ""
	if e.Enterprise {
		pen = "32473 (`EnterpriseNumber`)"
	}
	if e.Status != flow.Sent {
		sent = " (" + e.Status.String() + ")"
	}
	size := fmt.Sprint(e.Length)
	if e.Length == flow.VariableLength {
		size = "variable"
	}
	return fmt.Sprintf("| `%s`%s | %d | %s | %s (%s) | %s |", e.Name, sent, e.ID, pen, e.Type, size, e.Description)
}

// TestDocsListEveryElement keeps the operators' element table equal to the
// code: every element, in order, row for row. LOUPE_PRINT_DOC_TABLE=1
// prints the table to paste.
func TestDocsListEveryElement(t *testing.T) {
	var rows []string
	for _, e := range Elements() {
		rows = append(rows, docRow(e))
	}
	table := strings.Join(rows, "\n")
	if os.Getenv("LOUPE_PRINT_DOC_TABLE") == "1" {
		fmt.Println(table)
	}
	doc, err := os.ReadFile("../../../docs/exporters/ipfix.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), table) {
		t.Fatalf("docs/exporters/ipfix.md does not hold the element table; it should read:\n%s", table)
	}

	// The README lists the enterprise elements, the ones no collector
	// documents: all of flow's registry, sent, reserved and withdrawn.
	var enterprise []string
	for _, e := range Elements() {
		if e.Enterprise {
			enterprise = append(enterprise, docRow(e))
		}
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(enterprise, "\n"); !strings.Contains(string(readme), want) {
		t.Fatalf("README.md does not hold the enterprise element table; it should read:\n%s", want)
	}
}
