package kafka

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	good := []struct {
		in   string
		want Target
	}{
		{"kafka://k1:9092/flows", Target{Brokers: []string{"k1:9092"}, Topic: "flows"}},
		{"kafka://k1:19092,k2:9092,10.0.0.3:9093/loupe.flows-v1_x?format=json",
			Target{Brokers: []string{"k1:19092", "k2:9092", "10.0.0.3:9093"}, Topic: "loupe.flows-v1_x", Format: FormatJSON}},
		{"kafka://[::1]:9092,[fd00::2]:9093/t?format=protobuf",
			Target{Brokers: []string{"[::1]:9092", "[fd00::2]:9093"}, Topic: "t", Format: FormatProtobuf}},
		{"kafka://k1:9092/" + strings.Repeat("a", 249), Target{Brokers: []string{"k1:9092"}, Topic: strings.Repeat("a", 249)}},
	}
	for _, tc := range good {
		got, err := ParseTarget(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.in, got, tc.want)
		}
		// The canonical form parses back to the same target.
		again, err := ParseTarget(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("%s: String() %q parses to %+v, %v", tc.in, got.String(), again, err)
		}
	}

	bad := []struct{ in, msg string }{
		{"", "want kafka://"},
		{"kafk://k1/t", "want kafka://"},
		{"http://k1/t", "want kafka://"},
		{"kafka://k1:9092", "no topic"},
		{"kafka://k1:9092/", "no topic"},
		{"kafka:///t", "no broker"},
		{"kafka://k1/t", `broker "k1": want HOST:PORT`},
		{"kafka://k1:9092,k2/t", `broker "k2": want HOST:PORT`},
		{"kafka://[::1]/t", `broker "[::1]": want HOST:PORT`},
		{"kafka://k1:9092,,k2:9092/t", "empty broker"},
		{"kafka://k1:9092,/t", "empty broker"},
		{"kafka://k1:0/t", `bad port "0"`},
		{"kafka://k1:65536/t", `bad port "65536"`},
		{"kafka://k1:http/t", `bad port "http"`},
		{"kafka://:9092/t", "no host"},
		{"kafka://::1:9092/t", "IPv6 address in brackets"},
		{"kafka://user:pw@k1:9092/t", "credentials do not belong"},
		{"kafka://k1:9092/t?format=avro", `unknown format "avro"`},
		{"kafka://k1:9092/t?fromat=json", `unknown option "fromat"`},
		{"kafka://k1:9092/t?format=json&acks=1", `unknown option "acks"`},
		{"kafka://k1:9092/t?format=json&format=json", "more than once"},
		{"kafka://k1:9092/t?format=%zz", "query"},
		{"kafka://k1:9092/t#x", "fragment"},
		{"kafka://k1:9092/a/b", `character '/'`},
		{"kafka://k1:9092/fl ows", `character ' '`},
		{"kafka://k1:9092/..", `".." is not allowed`},
		{"kafka://k1:9092/" + strings.Repeat("a", 250), "250 characters"},
	}
	for _, tc := range bad {
		_, err := ParseTarget(tc.in)
		if err == nil {
			t.Errorf("%q: accepted", tc.in)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "kafka target") {
			t.Errorf("%q: error %q does not say %q", tc.in, err, tc.msg)
		}
	}
}

func TestNewRejectsBadTarget(t *testing.T) {
	if _, err := New("kafka://k1:9092/t?format=xml", Options{}); err == nil || !strings.Contains(err.Error(), `unknown format "xml"`) {
		t.Fatalf("New with a bad target: %v", err)
	}
}
