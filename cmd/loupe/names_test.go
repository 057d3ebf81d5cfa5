package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"loupe/internal/flow"
)

// TestFlowsAndTopShowNames: loupe flows shows the names of each end beside
// its address, and the pod of the interface, only when a record has names;
// loupe top groups by namespace, workload and service pairs; --namespace
// and --workload select records by either end, for both.
func TestFlowsAndTopShowNames(t *testing.T) {
	web := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "shop", Pod: "web-6d4f9-abcde", Workload: "web", WorkloadKind: "Deployment", Service: "web", Node: "n1"}
	cli := flow.K8sEnd{Kind: flow.K8sPod, Namespace: "tools", Pod: "cli-0", Workload: "cli", WorkloadKind: "StatefulSet", Node: "n1"}
	svc := flow.K8sEnd{Kind: flow.K8sService, Namespace: "shop", Service: "web"}
	node := flow.K8sEnd{Kind: flow.K8sNode, Node: "n1"}
	ext := flow.K8sEnd{Kind: flow.K8sExternal}
	named := func(r flow.Record, src, dst flow.K8sEnd, ifacePod string) flow.Record {
		r.K8s = &flow.K8s{Src: src, Dst: dst}
		if ifacePod != "" {
			r.K8s.IfacePod, r.K8s.IfaceNamespace = ifacePod, "shop"
		}
		return r
	}
	recs := []flow.Record{
		named(rec("10.244.0.3", "10.0.77.1", 40000, 8080, 6, 9000, time.Minute), cli, svc, ""),
		named(rec("10.244.0.2", "10.244.0.3", 8080, 40000, 6, 7000, time.Minute), web, cli, "web-6d4f9-abcde"),
		named(rec("192.168.1.10", "10.244.0.2", 41000, 8080, 6, 5000, time.Minute), node, web, "web-6d4f9-abcde"),
		named(rec("10.244.0.2", "198.51.100.1", 42000, 443, 6, 3000, time.Minute), web, ext, "web-6d4f9-abcde"),
		rec("10.9.9.9", "10.9.9.8", 1, 2, 17, 1000, time.Minute),
	}
	dir := writeRecords(t, 2, recs)

	// Without names in the answer, no name column.
	code, out, errOut := run(t, "flows", "--store", dir, "--src", "10.9.9.9")
	head, _ := tableRows(t, out)
	if code != 0 || slices.ContainsFunc(head, func(h string) bool { return strings.Contains(h, "NAME") || h == "IFACE POD" }) {
		t.Fatalf("flows of a record without names: exit %d, columns %v: %s", code, head, errOut)
	}
	code, out, errOut = run(t, "flows", "--store", dir, "--sort", "bytes")
	if code != 0 {
		t.Fatalf("flows: exit %d: %s", code, errOut)
	}
	head, rows := tableRows(t, out)
	for name, want := range map[string][]string{
		"SOURCE":    {"10.244.0.3:40000", "10.244.0.2:8080", "192.168.1.10:41000", "10.244.0.2:42000", "10.9.9.9:1"},
		"SRC NAME":  {"tools/cli-0", "shop/web-6d4f9-abcde", "n1 (node)", "shop/web-6d4f9-abcde", ""},
		"DST NAME":  {"shop/web (service)", "tools/cli-0", "shop/web-6d4f9-abcde", "(external)", ""},
		"IFACE POD": {"", "shop/web-6d4f9-abcde", "shop/web-6d4f9-abcde", "shop/web-6d4f9-abcde", ""},
	} {
		if got := column(t, head, rows, name); !slices.Equal(got, want) {
			t.Errorf("flows: %s %q, want %q:\n%s", name, got, want, out)
		}
	}

	for _, c := range []struct {
		args []string
		want []string // SOURCE of each row, by bytes
	}{
		{[]string{"--namespace", "tools"}, []string{"10.244.0.3:40000", "10.244.0.2:8080"}},
		{[]string{"--workload", "web"}, []string{"10.244.0.2:8080", "192.168.1.10:41000", "10.244.0.2:42000"}},
		{[]string{"--workload", "shop/web", "--namespace", "tools"}, []string{"10.244.0.2:8080"}},
		{[]string{"--workload", "shop/web", "--port", "443"}, []string{"10.244.0.2:42000"}},
	} {
		args := append([]string{"flows", "--store", dir, "--sort", "bytes"}, c.args...)
		code, out, errOut := run(t, args...)
		head, rows := tableRows(t, out)
		if code != 0 || head == nil {
			t.Fatalf("%v: exit %d, %s", c.args, code, errOut)
		}
		if got := column(t, head, rows, "SOURCE"); !slices.Equal(got, c.want) {
			t.Errorf("flows %v: %q, want %q", c.args, got, c.want)
		}
	}
	if code, _, errOut := run(t, "flows", "--store", dir, "--workload", "shop/"); code == 0 || !strings.Contains(errOut, "--workload") {
		t.Errorf("flows --workload shop/: exit %d, %s", code, errOut)
	}

	for _, c := range []struct {
		args     []string
		src, dst []string
		bytes    []string
	}{
		{[]string{"--by", "namespace"}, []string{"tools", "shop", "(node)", "shop", "-"}, []string{"shop", "tools", "shop", "(external)", "-"},
			[]string{"9000", "7000", "5000", "3000", "1000"}},
		{[]string{"--by", "workload"}, []string{"tools/cli (StatefulSet)", "shop/web (Deployment)", "(node)", "shop/web (Deployment)", "-"},
			[]string{"shop (service)", "tools/cli (StatefulSet)", "shop/web (Deployment)", "(external)", "-"},
			[]string{"9000", "7000", "5000", "3000", "1000"}},
		{[]string{"--by", "service"}, []string{"tools (pod)", "shop/web", "(node)", "shop/web", "-"},
			[]string{"shop/web", "tools (pod)", "shop/web", "(external)", "-"},
			[]string{"9000", "7000", "5000", "3000", "1000"}},
		{[]string{"--by", "namespace", "--namespace", "tools"}, []string{"tools", "shop"}, []string{"shop", "tools"}, []string{"9000", "7000"}},
	} {
		args := append([]string{"top", "--store", dir, "--raw"}, c.args...)
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("top %v: exit %d: %s", c.args, code, errOut)
		}
		head, rows := tableRows(t, out)
		what := strings.ToUpper(c.args[1])
		if got := column(t, head, rows, "SRC "+what); !slices.Equal(got, c.src) {
			t.Errorf("top %v: sources %q, want %q:\n%s", c.args, got, c.src, out)
		}
		if got := column(t, head, rows, "DST "+what); !slices.Equal(got, c.dst) {
			t.Errorf("top %v: destinations %q, want %q:\n%s", c.args, got, c.dst, out)
		}
		if got := column(t, head, rows, "BYTES"); !slices.Equal(got, c.bytes) {
			t.Errorf("top %v: bytes %q, want %q:\n%s", c.args, got, c.bytes, out)
		}
	}
	_, out, _ = run(t, "top", "--store", dir, "--by", "workload", "--json", "-n", "3")
	want := []string{
		`{"src_namespace":"tools","src_workload":"cli","src_workload_kind":"StatefulSet","dst_kind":"service","dst_namespace":"shop","bytes":9000,"packets":90,"flows":1,"accuracy":"exact"}`,
		`{"src_namespace":"shop","src_workload":"web","src_workload_kind":"Deployment","dst_namespace":"tools","dst_workload":"cli","dst_workload_kind":"StatefulSet","bytes":7000,"packets":70,"flows":1,"accuracy":"exact"}`,
		`{"src_kind":"node","dst_namespace":"shop","dst_workload":"web","dst_workload_kind":"Deployment","bytes":5000,"packets":50,"flows":1,"accuracy":"exact"}`,
	}
	if got := strings.Split(strings.TrimSpace(out), "\n"); !slices.Equal(got, want) {
		t.Errorf("top --by workload --json:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
