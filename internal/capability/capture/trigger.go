package capture

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"loupe/internal/datapath"
	"loupe/internal/pcapfilter"
)

// A trigger says which connections to capture: those that get an HTTP
// response with a status in its ranges, or a TCP reset, among the
// connections it samples; and how much of each to capture.
//
// Grammar (docs/capture.md, "Triggers"):
//
//	TRIGGER  = EVENT { " " OPTION }
//	EVENT    = "http.status=" CODES | "tcp.rst"
//	CODES    = CODE [ "-" CODE ] { "|" CODE [ "-" CODE ] }    100..599
//	OPTION   = "name=" NAME | "sample=" [ "1/" ] N | "packets=" N
//	         | "bytes=" SIZE | "duration=" DURATION
//	         | "filter=" PCAP-FILTER       (last: it takes the rest of the line)
//
// http.status=500-599 is the default trigger. N is a positive integer, SIZE
// a number of bytes with an optional k, M or G suffix (powers of 1024),
// DURATION a Go duration (30s, 5m) of whole seconds. A value of 0 for
// packets, bytes or duration lifts that limit.
type Trigger struct {
	// Name identifies the trigger (loupe triggers delete NAME): name=, or
	// the event as written canonically (http.status=500-599).
	Name string `json:"name"`
	// Text is the trigger as given, canonicalised: what `loupe triggers
	// list` shows and what Parse reads back.
	Text   string        `json:"trigger"`
	Event  string        `json:"event"` // "http.status" or "tcp.rst"
	Codes  []CodeRange   `json:"codes,omitempty"`
	Sample uint32        `json:"sample"` // 1 in Sample connections; 1: all
	Limits TriggerLimits `json:"limits"`
	// Filter limits the candidates to the connections whose first packet
	// the agent sees (usually the SYN) matches it; "": every connection.
	Filter string `json:"filter,omitempty"`

	compiled *pcapfilter.Filter
}

// CodeRange is a range of HTTP status codes, Lo to Hi inclusive.
type CodeRange struct {
	Lo uint16 `json:"lo"`
	Hi uint16 `json:"hi"`
}

// TriggerLimits bound what one triggered connection captures.
type TriggerLimits struct {
	Packets  uint32        `json:"packets"`
	Bytes    uint64        `json:"bytes"`
	Duration time.Duration `json:"duration_ns"`
}

// The events a trigger fires on.
const (
	EventHTTPStatus = "http.status"
	EventTCPReset   = "tcp.rst"
)

// DefaultTrigger is the trigger when capture is on and none is given.
const DefaultTrigger = "http.status=500-599"

// DefaultLimits bound a trace when the trigger does not: 10 000 packets,
// 64 MiB, 5 minutes.
var defaultLimits = TriggerLimits{Packets: 10000, Bytes: 64 << 20, Duration: 5 * time.Minute}

// ParseTrigger parses one trigger. Errors name the part at fault.
func ParseTrigger(s string) (Trigger, error) {
	var filter string
	hasFilter := false
	if i := strings.Index(s, "filter="); i >= 0 && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') {
		filter, hasFilter = strings.TrimSpace(s[i+len("filter="):]), true
		s = s[:i]
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Trigger{}, errors.New("empty trigger: want e.g. http.status=500-599")
	}
	t := Trigger{Sample: 1, Limits: defaultLimits}
	ev := fields[0]
	switch {
	case ev == EventTCPReset:
		t.Event = EventTCPReset
	case strings.HasPrefix(ev, EventHTTPStatus+"="):
		t.Event = EventHTTPStatus
		codes, err := parseCodes(strings.TrimPrefix(ev, EventHTTPStatus+"="))
		if err != nil {
			return Trigger{}, fmt.Errorf("trigger %q: %w", s, err)
		}
		t.Codes = codes
	default:
		return Trigger{}, fmt.Errorf("trigger %q: %q is not an event: want http.status=CODES (e.g. 500-599) or tcp.rst", s, ev)
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok || val == "" {
			return Trigger{}, fmt.Errorf("trigger %q: option %q: want KEY=VALUE (name, sample, packets, bytes, duration, filter)", s, f)
		}
		if seen[key] {
			return Trigger{}, fmt.Errorf("trigger %q: option %s given twice", s, key)
		}
		seen[key] = true
		if err := t.setOption(key, val); err != nil {
			return Trigger{}, fmt.Errorf("trigger %q: %s=%s: %w", s, key, val, err)
		}
	}
	if hasFilter {
		if filter == "" {
			return Trigger{}, fmt.Errorf("trigger %q: filter= needs a pcap filter, e.g. filter=tcp port 80", s)
		}
		f, err := pcapfilter.Compile(filter)
		if err != nil {
			return Trigger{}, fmt.Errorf("trigger: %w", err)
		}
		t.Filter, t.compiled = f.String(), f
	}
	t.Text = t.canonical()
	if t.Name == "" {
		// The event, canonicalised: http.status=500-599.
		t.Name, _, _ = strings.Cut(t.Text, " ")
	}
	return t, nil
}

func (t *Trigger) setOption(key, val string) error {
	switch key {
	case "name":
		for _, r := range val {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				return errors.New("a name holds letters, digits, '-', '_' and '.'")
			}
		}
		if len(val) > 64 {
			return errors.New("a name is at most 64 characters")
		}
		t.Name = val
	case "sample":
		n, err := strconv.ParseUint(strings.TrimPrefix(val, "1/"), 10, 32)
		if err != nil || n == 0 {
			return errors.New("want N or 1/N, N a positive integer: one connection in N is a candidate")
		}
		t.Sample = uint32(n)
	case "packets":
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			return errors.New("want a number of packets (0: no limit)")
		}
		t.Limits.Packets = uint32(n)
	case "bytes":
		n, err := parseSize(val)
		if err != nil {
			return err
		}
		t.Limits.Bytes = n
	case "duration":
		d, err := time.ParseDuration(val)
		if err != nil || d < 0 || d%time.Second != 0 || d > 24*time.Hour {
			return errors.New("want whole seconds up to 24h, e.g. 30s or 5m (0: no limit)")
		}
		t.Limits.Duration = d
	default:
		return fmt.Errorf("unknown option %s: want name, sample, packets, bytes, duration or filter", key)
	}
	return nil
}

func parseCodes(s string) ([]CodeRange, error) {
	if s == "" {
		return nil, errors.New("http.status= needs codes, e.g. 500-599 or 500|502-504")
	}
	var out []CodeRange
	for _, part := range strings.Split(s, "|") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCode(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseCode(hi); err != nil {
				return nil, err
			}
		}
		if a > b {
			return nil, fmt.Errorf("status range %s is empty: low to high, e.g. 500-599", part)
		}
		out = append(out, CodeRange{Lo: a, Hi: b})
	}
	if len(out) > datapath.MaxRules {
		return nil, fmt.Errorf("%d status ranges: at most %d", len(out), datapath.MaxRules)
	}
	return out, nil
}

func parseCode(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n < 100 || n > 599 {
		return 0, fmt.Errorf("status code %q: want a number from 100 to 599", s)
	}
	return uint16(n), nil
}

func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	num := s
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, num = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, num = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, num = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > (1<<62)/mult {
		return 0, errors.New("want a number of bytes, with an optional k, M or G suffix (0: no limit)")
	}
	return n * mult, nil
}

// canonical renders t in the grammar, with every limit spelled out.
func (t Trigger) canonical() string {
	var b strings.Builder
	b.WriteString(t.Event)
	if t.Event == EventHTTPStatus {
		b.WriteByte('=')
		for i, c := range t.Codes {
			if i > 0 {
				b.WriteByte('|')
			}
			if c.Lo == c.Hi {
				fmt.Fprintf(&b, "%d", c.Lo)
			} else {
				fmt.Fprintf(&b, "%d-%d", c.Lo, c.Hi)
			}
		}
	}
	if t.Sample > 1 {
		fmt.Fprintf(&b, " sample=1/%d", t.Sample)
	}
	fmt.Fprintf(&b, " packets=%d bytes=%d duration=%s", t.Limits.Packets, t.Limits.Bytes, durationText(t.Limits.Duration))
	if t.Filter != "" {
		b.WriteString(" filter=")
		b.WriteString(t.Filter)
	}
	return b.String()
}

func durationText(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.String()
}

// rules are the datapath rules of t: one per status range.
func (t Trigger) rules() []datapath.Rule {
	base := datapath.Rule{Sample: t.Sample, MaxPackets: t.Limits.Packets, MaxBytes: t.Limits.Bytes, MaxDuration: t.Limits.Duration}
	if t.Event == EventTCPReset {
		base.Kind = datapath.RuleTCPReset
		return []datapath.Rule{base}
	}
	out := make([]datapath.Rule, 0, len(t.Codes))
	for _, c := range t.Codes {
		r := base
		r.Kind, r.StatusLo, r.StatusHi = datapath.RuleHTTPStatus, c.Lo, c.Hi
		out = append(out, r)
	}
	return out
}
