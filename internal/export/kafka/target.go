package kafka

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"loupe/internal/config/check"
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
		return Target{}, fmt.Errorf("kafka target %s: %w (want %s)", check.Quote(s), err, Syntax)
	}
	return t, nil
}

// CheckTarget checks a target's syntax. Its error gives the reason alone,
// for a caller that names the target and the syntax itself.
func CheckTarget(s string) error {
	_, err := parseTarget(s)
	return err
}

func parseTarget(s string) (Target, error) {
	var t Target
	rest, ok := strings.CutPrefix(s, "kafka://")
	if !ok {
		return t, errors.New("not a kafka:// URL")
	}
	if strings.Contains(rest, "#") {
		return t, errors.New("a fragment (#...) has no meaning here")
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, topic, ok := strings.Cut(rest, "/")
	if !ok || topic == "" {
		return t, errors.New("no topic")
	}
	if strings.Contains(hosts, "@") {
		return t, errors.New("credentials do not belong in the target (it is logged): use the SASL options")
	}
	if hosts == "" {
		return t, errors.New("no broker")
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
			return t, fmt.Errorf("unknown option %s (the only option is format=protobuf|json)", check.Quote(k))
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
			return t, fmt.Errorf("unknown format %s (want protobuf or json)", check.Quote(v[0]))
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
			return "", fmt.Errorf("broker %s: put an IPv6 address in brackets ([::1]:9092)", check.Quote(h))
		}
		return "", fmt.Errorf("broker %s: want HOST:PORT", check.Quote(h))
	}
	if host == "" {
		return "", fmt.Errorf("broker %s: no host", check.Quote(h))
	}
	if strings.ContainsAny(host, " /\\@") {
		return "", fmt.Errorf("broker %s: bad host", check.Quote(h))
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("broker %s: bad port %s (want 1-65535)", check.Quote(h), check.Quote(port))
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
		return fmt.Errorf("topic %s is not allowed by Kafka", check.Quote(topic))
	}
	for _, c := range topic {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic %s: character %q is not allowed (Kafka allows a-z A-Z 0-9 . _ -)", check.Quote(topic), c)
		}
	}
	return nil
}
