package kafka

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Format is how a flow record is encoded in a Kafka record's value.
type Format uint8

const (
	// FormatProtobuf is one loupe.flow.v1.FlowRecord (proto/loupe/flow/v1/
	// flow.proto) per Kafka record: compact, typed, schema published.
	FormatProtobuf Format = iota
	// FormatJSON is the agent's one JSON object form (flow.AppendJSON), the
	// same as `loupe flows --json` and the JSON sink, without a newline.
	FormatJSON
)

func (f Format) String() string {
	switch f {
	case FormatProtobuf:
		return "protobuf"
	case FormatJSON:
		return "json"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// maxTopicLen is Kafka's limit on a topic name.
const maxTopicLen = 249

// Target is a parsed kafka:// export target.
type Target struct {
	// Brokers are the bootstrap brokers as host:port; the client learns
	// the rest of the cluster from them.
	Brokers []string
	Topic   string
	Format  Format
}

// String returns the canonical form of the target, as ParseTarget accepts
// it. It holds no secret (credentials are never part of a target), so it
// names the exporter in logs and metrics.
func (t Target) String() string {
	s := "kafka://" + strings.Join(t.Brokers, ",") + "/" + t.Topic
	if t.Format != FormatProtobuf {
		s += "?format=" + t.Format.String()
	}
	return s
}

// ParseTarget parses kafka://BROKER[,BROKER...]/TOPIC[?format=protobuf|json].
// A broker is host:port (IPv6 literals in brackets); the port is required.
// The format defaults to protobuf. Unknown query keys, credentials and
// fragments are errors: a typo must not silently select a default.
func ParseTarget(s string) (Target, error) {
	t, err := parseTarget(s)
	if err != nil {
		return Target{}, fmt.Errorf("kafka target %q: %w", s, err)
	}
	return t, nil
}

func parseTarget(s string) (Target, error) {
	var t Target
	rest, ok := strings.CutPrefix(s, "kafka://")
	if !ok {
		return t, errors.New("want kafka://BROKER[,BROKER]/TOPIC[?format=protobuf|json]")
	}
	if strings.Contains(rest, "#") {
		return t, errors.New("a fragment (#...) has no meaning here")
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, topic, ok := strings.Cut(rest, "/")
	if !ok || topic == "" {
		return t, errors.New("no topic: want kafka://BROKER[,BROKER]/TOPIC")
	}
	if strings.Contains(hosts, "@") {
		return t, errors.New("credentials do not belong in the target (it is logged): use the SASL options")
	}
	if hosts == "" {
		return t, errors.New("no broker: want kafka://BROKER[,BROKER]/TOPIC")
	}
	for h := range strings.SplitSeq(hosts, ",") {
		b, err := parseBroker(h)
		if err != nil {
			return t, err
		}
		t.Brokers = append(t.Brokers, b)
	}
	if err := validTopic(topic); err != nil {
		return t, err
	}
	t.Topic = topic
	if query == "" {
		return t, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return t, fmt.Errorf("query: %w", err)
	}
	for k, v := range q {
		if k != "format" {
			return t, fmt.Errorf("unknown option %q (the only option is format=protobuf|json)", k)
		}
		if len(v) != 1 {
			return t, errors.New("format given more than once")
		}
		switch v[0] {
		case "protobuf":
			t.Format = FormatProtobuf
		case "json":
			t.Format = FormatJSON
		default:
			return t, fmt.Errorf("unknown format %q (want protobuf or json)", v[0])
		}
	}
	return t, nil
}

// parseBroker checks one host:port. The port is required, as it is for
// every network target of the agent: Kafka listeners are often on other
// ports than 9092, and a guessed port fails late and obscurely.
func parseBroker(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty broker in the list")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if strings.Count(h, ":") > 1 && !strings.HasPrefix(h, "[") {
			return "", fmt.Errorf("broker %q: put an IPv6 address in brackets ([::1]:9092)", h)
		}
		return "", fmt.Errorf("broker %q: want HOST:PORT (%w)", h, err)
	}
	if host == "" {
		return "", fmt.Errorf("broker %q: no host", h)
	}
	if strings.ContainsAny(host, " /\\@") {
		return "", fmt.Errorf("broker %q: bad host", h)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("broker %q: bad port %q (want 1-65535)", h, port)
	}
	return net.JoinHostPort(host, port), nil
}

// validTopic applies Kafka's own rules, so that a bad name fails at start
// rather than at the first produce.
func validTopic(topic string) error {
	if len(topic) > maxTopicLen {
		return fmt.Errorf("topic is %d characters long (Kafka allows %d)", len(topic), maxTopicLen)
	}
	if topic == "." || topic == ".." {
		return fmt.Errorf("topic %q is not allowed by Kafka", topic)
	}
	for _, c := range topic {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic %q: character %q is not allowed (Kafka allows a-z A-Z 0-9 . _ -)", topic, c)
		}
	}
	return nil
}
