package attach

import (
	"slices"
	"testing"
)

func TestMatches(t *testing.T) {
	cases := []struct {
		include, exclude []string
		name             string
		want             bool
	}{
		{nil, nil, "eth0", true},
		{nil, nil, "lo", false},
		{[]string{"lo"}, nil, "lo", true},
		{[]string{"eth*", "veth*"}, nil, "veth12ab", true},
		{[]string{"eth*"}, nil, "wlan0", false},
		{[]string{"eth*", "veth*"}, []string{"veth-infra*"}, "veth-infra0", false},
		{nil, []string{"docker0"}, "docker0", false},
		{nil, []string{"docker0"}, "eth1", true},
	}
	for _, c := range cases {
		m := &Manager{cfg: Config{Include: c.include, Exclude: c.exclude}}
		if got := m.Matches(c.name); got != c.want {
			t.Errorf("include %v exclude %v: Matches(%q) = %v, want %v", c.include, c.exclude, c.name, got, c.want)
		}
	}
}

func TestUnmatched(t *testing.T) {
	names := []string{"lo", "eth0", "veth12ab"}
	got := unmatched([]string{"eth*", "nosuch*", "veth1?ab", "wlan0"}, names)
	if !slices.Equal(got, []string{"nosuch*", "wlan0"}) {
		t.Fatalf("unmatched = %q, want [nosuch* wlan0]", got)
	}
	if got := unmatched(nil, names); got != nil {
		t.Fatalf("no globs: %q", got)
	}
}

func TestBadPatternRejected(t *testing.T) {
	if _, err := NewManager(Config{Include: []string{"eth["}}); err == nil {
		t.Fatal("malformed glob accepted")
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]Mode{"auto": Auto, "tcx": TCX, "tc": TC} {
		if m, err := ParseMode(s); err != nil || m != want || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("xdp"); err == nil {
		t.Error("ParseMode accepted xdp")
	}
	if p, err := ParsePosition("tail"); err != nil || p != Tail {
		t.Errorf("ParsePosition(tail) = %v, %v", p, err)
	}
	if _, err := ParsePosition("middle"); err == nil {
		t.Error("ParsePosition accepted middle")
	}
}
