package promflow

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"loupe/internal/flow"
)

func TestParseKeys(t *testing.T) {
	got, err := ParseKeys([]string{"dst_port", " src_group ", "eth_type"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Key{KeyDstPort, KeySrcGroup, KeyEthType}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := strings.Join(KeyNames(), ","); got != "eth_type,src_port,dst_port,src_group,dst_group,dscp,vlan_id,namespace,workload" {
		t.Fatalf("KeyNames = %s", got)
	}
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"dst_addr"}, `keys: unknown key "dst_addr" (valid: eth_type, src_port, dst_port, src_group, dst_group, dscp, vlan_id, namespace, workload)`},
		{[]string{"DST_PORT"}, `keys: unknown key "DST_PORT"`},
		{[]string{"dst_port", "dst_port"}, `keys: "dst_port" listed twice`},
	} {
		_, err := ParseKeys(tc.in)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ParseKeys(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestParseGroup(t *testing.T) {
	g, err := ParseGroup("internal=10.0.0.0/8, 192.168.0.0/16,fd00::/8,192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	want := Group{Name: "internal", Prefixes: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("192.0.2.7/32"),
	}}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("got %+v, want %+v", g, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"internal", `cidr_groups: "internal": want name=prefix[,prefix...]`},
		{"internal=", `cidr_groups: "internal=": no prefix after '='`},
		{"=10.0.0.0/8", `cidr_groups: a group has no name`},
		{"other=10.0.0.0/8", `cidr_groups: group name "other" is reserved`},
		{"none=10.0.0.0/8", `cidr_groups: group name "none" is reserved`},
		{"a=10.0.0.1/8", `cidr_groups: group "a": 10.0.0.1/8 has host bits set (did you mean 10.0.0.0/8?)`},
		{"a=10.0.0.0/33", `cidr_groups: group "a": "10.0.0.0/33" is not a CIDR prefix`},
		{"a=example.com", `cidr_groups: group "a": "example.com" is neither a prefix nor an address`},
		{"a=10.0.0.0/8,,", `cidr_groups: group "a": "" is neither a prefix nor an address`},
		{"a=10.0.0.0/8,10.0.0.0/8", `cidr_groups: group "a": 10.0.0.0/8 listed twice`},
		{"a=fe80::/10%eth0", `cidr_groups: group "a": "fe80::/10%eth0" is not a CIDR prefix`},
	} {
		_, err := ParseGroup(tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseGroup(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"a=10.0.0.0/8", "b=10.0.0.0/8"}, `cidr_groups: 10.0.0.0/8 is in both "a" and "b"`},
		{[]string{"a=10.0.0.0/8", "b=fd00::/8", "a=10.0.0.0/8"}, `cidr_groups: group "a": 10.0.0.0/8 listed twice`},
		{[]string{"a=10.0.0.0/8", "fd00::/8"}, `cidr_groups: "fd00::/8": want name=prefix[,prefix...]`},
	} {
		_, err := ParseGroups(tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseGroups(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
	// Entries that repeat a name add to the group (env and flag lists
	// arrive split at commas); groups keep their first entry's order.
	gs, err := ParseGroups([]string{"lan=10.0.0.0/8", "dmz=192.0.2.0/24", "lan=fd00::/8,172.16.0.0/12"})
	if err != nil {
		t.Fatal(err)
	}
	wantGroups := []Group{
		{Name: "lan", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("172.16.0.0/12")}},
		{Name: "dmz", Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}},
	}
	if !reflect.DeepEqual(gs, wantGroups) {
		t.Fatalf("ParseGroups merged into %+v, want %+v", gs, wantGroups)
	}
}

func TestValidate(t *testing.T) {
	lan := Group{Name: "lan", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, ""},
		{Options{MaxSeries: 2, Keys: []Key{KeyDstGroup}, Groups: []Group{lan}}, ""},
		{Options{MaxSeries: -1}, "max_series: -1 is negative"},
		{Options{MaxSeries: 1}, ""},
		{Options{IdleTTL: -1}, "idle_ttl: -1ns is negative"},
		{Options{Keys: []Key{0}}, "keys: unknown key key(0)"},
		{Options{Keys: []Key{KeyDSCP, KeyDSCP}}, `keys: "dscp" listed twice`},
		{Options{Keys: []Key{KeySrcGroup}}, "keys: src_group and dst_group need cidr_groups"},
		{Options{Keys: []Key{KeySrcGroup}, Groups: []Group{lan, lan}}, `cidr_groups: group "lan" defined twice`},
		{Options{Keys: []Key{KeySrcGroup}, Groups: []Group{{Name: "x"}}}, `cidr_groups: group "x" has no prefix`},
	} {
		err := tc.opts.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.opts, err, tc.want)
		}
	}
	if s, err := Open(Options{MaxSeries: -2}); s != nil || err == nil || err.Error() != "prometheus: max_series: -2 is negative" {
		t.Errorf("Open with invalid options: %v, %v", s, err)
	}
	if s, err := Open(Options{}); s == nil || err != nil {
		t.Errorf("Open(Options{}): %v, %v", s, err)
	}
	defer func() {
		if r := recover(); r != "promflow: max_series: -2 is negative" {
			t.Fatalf("New with invalid options: recovered %v", r)
		}
	}()
	New(Options{MaxSeries: -2})
}

func TestLongestPrefixMatch(t *testing.T) {
	groups, err := ParseGroups([]string{
		"internal=10.0.0.0/8,fd00::/8",
		"lab=10.20.0.0/16,fd00:20::/32",
		"gw=10.20.0.1,fd00:20::1",
		"odd=10.20.128.0/17,fd00:20:8000::/33", // lengths that do not fall on a byte
		"world4=0.0.0.0/0",
	})
	if err != nil {
		t.Fatal(err)
	}
	tab := newGroupTable(groups)
	for _, tc := range []struct {
		addr string
		want string
	}{
		{"10.1.2.3", "internal"},
		{"10.20.1.1", "lab"},
		{"10.20.0.1", "gw"},
		{"10.20.0.2", "lab"},
		{"10.20.127.255", "lab"},
		{"10.20.128.0", "odd"},
		{"10.20.255.255", "odd"},
		{"11.0.0.1", "world4"},
		{"0.0.0.0", "world4"},
		{"fd00::1", "internal"},
		{"fd00:20::2", "lab"},
		{"fd00:20::1", "gw"},
		{"fd00:20:7fff::1", "lab"},
		{"fd00:20:8000::1", "odd"},
		{"2001:db8::1", "other"}, // no ::/0 group
	} {
		a := netip.MustParseAddr(tc.addr)
		et := uint16(flow.EtherTypeIPv6)
		if a.Is4() {
			et = flow.EtherTypeIPv4
		}
		b := a.As16()
		if got := tab.names[tab.lookup(et, &b)]; got != tc.want {
			t.Errorf("%s: group %q, want %q", tc.addr, got, tc.want)
		}
	}
	// No address: non-IP flows and IPv4 keys cut short before the addresses.
	var zero [16]byte
	if got := tab.names[tab.lookup(flow.EtherTypeIPv4, &zero)]; got != "none" {
		t.Errorf("IPv4 without addresses: %q, want none", got)
	}
	arp := netip.MustParseAddr("10.1.2.3").As16()
	if got := tab.names[tab.lookup(0x0806, &arp)]; got != "none" {
		t.Errorf("ARP: %q, want none", got)
	}
}
