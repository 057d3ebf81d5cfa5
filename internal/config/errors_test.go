package config

import (
	"errors"
	"flag"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string // want follows "config file PATH: "
	}{
		{"unknown top-level key", "map_type: auto\nlisten: none\n\nflow_budgt: 3\n", `line 4: unknown key "flow_budgt"`},
		{"unknown key under store", "store:\n  path: /x\n  pth: /y\n", `line 3: unknown key "store.pth"`},
		{"unknown section", "stor:\n  path: /x\n", `line 1: unknown key "stor"`},
		{"dotted key is not a path", "store.path: /x\n", `line 1: unknown key "store.path"`},
		{"leaf given a mapping", "flow_budget:\n  x: 1\n", "line 2: flow_budget: want a single value, got a mapping"},
		{"section given a scalar", "store: /x\n", `line 1: store: want a mapping of keys, got "/x"`},
		{"list given a scalar", "interfaces: eth0\n", `line 1: interfaces: want a list such as [a, b], got "eth0"`},
		{"list of lists", "interfaces:\n  - [a]\n", "line 2: interfaces: list elements must be strings, got a list"},
		{"null list element", "export:\n  - ~\n", "line 2: export: list elements must be strings, got null"},
		{"duplicate key", "flow_budget: 100\nflow_budget: 200\n", `line 2: duplicate key "flow_budget" (first at line 1)`},
		{"duplicate nested key", "store:\n  path: /a\n  path: /b\n", `line 3: duplicate key "store.path" (first at line 2)`},
		{"not a mapping", "- a\n- b\n", "line 1: want a mapping of keys at the top level, got a list"},
		{"two documents", "flow_budget: 100\n---\nflow_budget: 200\n", "line 2: more than one YAML document"},
		{"syntax error", "flow_budget: [100\n", "line 1: did not find expected ',' or ']'"},
		{"integer syntax", "flow_budget: 1.5\n", `line 1: flow_budget: invalid integer "1.5"`},
		{"duration without unit", "store:\n  retention: 3600\n", `line 2: store.retention: invalid duration "3600"`},
		{"size with decimal unit", "ringbuf_size: 4MB\n", `line 1: ringbuf_size: invalid size "4MB"`},
		{"range", "\n\nflow_budget: 3\n", "line 3: flow_budget: must be between 16 and 16777216, got 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path, err := run(t, tc.yaml, nil)
			if err == nil {
				t.Fatal("no error")
			}
			if prefix := "config file " + path + ": "; !strings.HasPrefix(err.Error(), prefix+tc.want) {
				t.Fatalf("error %q\nwant prefix %q", err, prefix+tc.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "absent.yaml")
		set := flag.NewFlagSet("run", flag.ContinueOnError)
		f := BindFlags(set)
		if err := set.Parse([]string{"--config", path}); err != nil {
			t.Fatal(err)
		}
		_, err := Load(f, nil)
		if want := "config file " + path + ": no such file or directory"; err == nil || err.Error() != want {
			t.Fatalf("error %v, want %q", err, want)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("error %v does not report a missing file", err)
		}
	})
}

func TestEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"unknown variable", []string{"PATH=/bin", "LOUPE_FLOW_BUGDET=100"}, "config: unknown environment variable LOUPE_FLOW_BUGDET"},
		{"bare prefix", []string{"LOUPE_=1"}, "config: unknown environment variable LOUPE_"},
		{"integer syntax", []string{"LOUPE_FLOW_BUDGET=lots"}, `config: environment variable LOUPE_FLOW_BUDGET: flow_budget: invalid integer "lots"`},
		{"duration syntax", []string{"LOUPE_CACHE_ACTIVE_TIMEOUT=5"}, `config: environment variable LOUPE_CACHE_ACTIVE_TIMEOUT: cache_active_timeout: invalid duration "5"`},
		{"size syntax", []string{"LOUPE_RINGBUF_SIZE=4M"}, `config: environment variable LOUPE_RINGBUF_SIZE: ringbuf_size: invalid size "4M"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(nil, tc.env)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--flow-budget", "lots"}, `invalid value "lots" for flag -flow-budget`},
		{[]string{"--cache-active-timeout", "5"}, `invalid value "5" for flag -cache-active-timeout`},
		{[]string{"--ringbuf-size", "4MB"}, `invalid value "4MB" for flag -ringbuf-size: invalid size "4MB"`},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := run(t, "", nil, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// invalidCases are values that parse but are out of bounds; each is tried
// from every source and through Validate.
func invalidCases() []struct{ key, text, want string } {
	return []struct{ key, text, want string }{
		{"interfaces", "eth[", `invalid interface pattern "eth["`},
		{"interfaces", `eth0\`, "invalid interface pattern"},
		{"exclude", "veth/*", `invalid interface pattern "veth/*"`},
		{"cache_active_timeout", "5ms", "must be between 10ms and 1h, got 5ms"},
		{"cache_active_timeout", "61m", "must be between 10ms and 1h, got 1h1m"},
		{"cache_active_timeout", "-1s", "must be between 10ms and 1h, got -1s"},
		{"flow_budget", "3", "must be between 16 and 16777216, got 3"},
		{"flow_budget", "16777217", "must be between 16 and 16777216, got 16777217"},
		{"ringbuf_size", "6000", "must be a power of two, got 6000"},
		{"ringbuf_size", "3MiB", "must be a power of two, got 3145728"},
		{"ringbuf_size", "2048", "must be between 4KiB and 1GiB, got 2KiB"},
		{"ringbuf_size", "0", "must be between 4KiB and 1GiB, got 0"},
		{"ringbuf_size", "2GiB", "must be between 4KiB and 1GiB, got 2GiB"},
		{"memory", "512KiB", "must be 0 (no budget) or between 1MiB and 1TiB, got 512KiB"},
		{"flow_budget", "8", "must be between 16 and 16777216, got 8"},
		{"map_type", "hash", `must be one of auto, percpu, shared, ringbuf, got "hash"`},
		{"attach_mode", "xdp", `must be one of auto, tcx, tc, got "xdp"`},
		{"attach_position", "middle", `must be one of head, tail, got "middle"`},
		{"pin_dir", "", `must not be empty (use "none" to disable pinning)`},
		{"store.path", "", `must not be empty (use "none" to disable the store)`},
		{"store.retention", "59s", "must be at least 1m, got 59s"},
		{"store.max_size", "1023KiB", "must be 0 (no limit) or between 1MiB and 4294967296GiB, got 1023KiB"},
		{"listen", "localhost", `invalid address "localhost": want host:port, or "none" to disable the listener`},
		{"listen", "127.0.0.1:70000", `invalid port "70000" in "127.0.0.1:70000": want a number 0-65535`},
		{"listen", ":http", `invalid port "http"`},
		{"listen", "NONE", `invalid address "NONE"`},
		{"control.socket", "", `must not be empty (use "none" to disable the control socket)`},
		{"control.socket", "/" + strings.Repeat("s", 120), "121 bytes long: a unix socket path holds at most 107"},
		{"control.listen", "9465", `invalid address "9465": want host:port, or "none" for no TCP listener`},
		{"control.listen", "127.0.0.1:65536", `invalid port "65536" in "127.0.0.1:65536": want a number 0-65535`},
		{"control.token_file", strings.Repeat("t", 5000), "5000 bytes long: longer than 4095"},
		{"export", "sflow://collector:6343", `unknown sink "sflow://collector:6343" (known: json:PATH or json:- (stdout); ipfix+udp://HOST:PORT;`},
		{"export", "kafka://broker:9092", `invalid target "kafka://broker:9092": no topic (want kafka://BROKER[,BROKER]/TOPIC[?format=protobuf|json])`},
		{"prometheus.keys", "dst_ip", `unknown key "dst_ip" (valid: `},
		{"prometheus.cidr_groups", "lan=10.0.0.0/33", `group "lan": "10.0.0.0/33" is not a CIDR prefix`},

		{"otlp.headers", "x tenant=a", `header "x tenant": names take only letters, digits, '-', '_' and '.'`},
		{"otlp.headers", "Bearer secret", `entry 1 is not key=value`},
		{"ipfix.mtu", "100", "must be between 512 and 65535, got 100"},
		{"kafka.batch_max_bytes", "65MiB", "must be between 1KiB and 64MiB, got 65MiB"},
		{"delivery.queue_size", "0", "must be between 1 and 16777216, got 0"},
		{"store.path", "/" + strings.Repeat("d", 5000), "5001 bytes long: longer than 4095, the longest path Linux accepts"},
		{"interfaces", strings.Repeat("e", 300), `interface pattern "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"... (300 bytes) is longer than 256 bytes`},
		{"kafka.tls.ca_file", strings.Repeat("c", 5000), "5000 bytes long: longer than 4095"},
		{"otlp.headers_file", strings.Repeat("h", 5000), "5000 bytes long: longer than 4095"},
		{"otlp.tls.server_name", strings.Repeat("s", 254), "254 bytes long: a DNS name has at most 253"},
		{"export", "json:" + strings.Repeat("p", 5000), `invalid target "json:` + strings.Repeat("p", 59) + `"... (5005 bytes): path 5000 bytes long: longer than 4095`},
		{"export", "json:", `invalid target "json:": missing path (want json:PATH or json:- (stdout))`},
		{"export", "json:-,json:-", `duplicate target "json:-"`},
		{"log_level", "trace", `must be one of debug, info, warn, error, got "trace"`},
		{"log_format", "xml", `must be one of text, json, got "xml"`},
	}
}

func TestInvalidValuesNameKeyAndSource(t *testing.T) {
	for _, tc := range invalidCases() {
		f := fieldByKey(t, tc.key)
		t.Run(tc.key+"="+tc.text, func(t *testing.T) {
			line := strconv.Itoa(strings.Count(tc.key, ".") + 1) // a line per level
			_, path, err := run(t, yamlFor(t, tc.key, tc.text), nil)
			checkErr(t, "file", err, "config file "+path+": line "+line+": "+tc.key+": "+tc.want)

			_, _, err = run(t, "", []string{f.env + "=" + tc.text})
			checkErr(t, "env", err, "config: environment variable "+f.env+": "+tc.key+": "+tc.want)

			_, _, err = run(t, "", nil, "--"+f.flag+"="+tc.text)
			checkErr(t, "flag", err, "config: flag --"+f.flag+": "+tc.key+": "+tc.want)

			c := Default()
			v, err := parseText(f.kind, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			f.set(&c, v)
			checkErr(t, "Validate", c.Validate(), "config: "+tc.key+": "+tc.want)
		})
	}
}

func TestInvalidBoolean(t *testing.T) {
	_, path, err := run(t, "kafka:\n  tls:\n    enabled: yes\n", nil)
	checkErr(t, "file", err, "config file "+path+": line 3: kafka.tls.enabled: invalid boolean \"yes\" (want true or false)")
	_, _, err = run(t, "", []string{"LOUPE_OTLP_TLS_ENABLED=on"})
	checkErr(t, "env", err, "config: environment variable LOUPE_OTLP_TLS_ENABLED: otlp.tls.enabled: invalid boolean \"on\"")
	_, _, err = run(t, "", nil, "--kafka-tls-enabled=maybe")
	checkErr(t, "flag", err, `invalid boolean value "maybe" for -kafka-tls-enabled`)
}

func checkErr(t *testing.T, source string, err error, want string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("%s: error %v\nwant prefix %s", source, err, want)
	}
}

func TestInvalidFileValueRejectedEvenIfOverridden(t *testing.T) {
	_, _, err := run(t, "log_level: trace\n", []string{"LOUPE_LOG_LEVEL=debug"}, "--log-level", "warn")
	if err == nil || !strings.Contains(err.Error(), "log_level") {
		t.Fatalf("error %v, want the file's log_level rejected", err)
	}
}

func TestValidateReportsEveryKey(t *testing.T) {
	c := Default()
	c.FlowBudget = 1
	c.LogFormat = "xml"
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"config: flow_budget: ", "config: log_format: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestPrometheusGroupKeyNeedsGroups(t *testing.T) {
	_, _, err := run(t, "prometheus:\n  keys: [dst_group]\n", nil)
	checkErr(t, "file", err, "config: prometheus.keys: src_group and dst_group need cidr_groups")
	if _, _, err := run(t, "", []string{"LOUPE_PROMETHEUS_KEYS=dst_group", "LOUPE_PROMETHEUS_CIDR_GROUPS=lan=10.0.0.0/8"}); err != nil {
		t.Fatalf("group key with groups: %v", err)
	}
}
