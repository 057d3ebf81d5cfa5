package check

import (
	"strings"
	"testing"
)

func TestQuoteCutsLongValues(t *testing.T) {
	if got := Quote("eth0"); got != `"eth0"` {
		t.Errorf("Quote(eth0) = %s", got)
	}
	long := strings.Repeat("a", 20<<20)
	want := `"` + strings.Repeat("a", MaxQuoted) + `"... (20971520 bytes)`
	if got := Quote(long); got != want {
		t.Errorf("Quote of 20 MiB = %.100s", got)
	}
	if got := Cut(long); got != strings.Repeat("a", MaxQuoted)+"... (20971520 bytes)" {
		t.Errorf("Cut of 20 MiB = %.100s", got)
	}
	// A cut never splits a rune: é is 2 bytes, so 64 bytes end inside one
	// when the value starts with one ASCII byte.
	v := "x" + strings.Repeat("é", 100)
	if got := Quote(v); !strings.HasPrefix(got, `"x`+strings.Repeat("é", 31)+`"...`) {
		t.Errorf("Quote split a rune: %s", got)
	}
}

func TestReadFileLimit(t *testing.T) {
	if _, err := ReadFile("/dev/zero", 1<<20); err == nil || err.Error() != "larger than 1MiB, the limit for this file" {
		t.Fatalf("/dev/zero: %v", err)
	}
}
