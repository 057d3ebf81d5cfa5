package flow

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// TimeLayout is RFC 3339 with nanoseconds, always nine digits, in UTC.
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// AppendJSON appends r as one JSON object (no trailing newline): every
// field of Fields, in order, under its name, but the optional fields that
// do not apply to r (the error bounds of a record that is not an
// estimate). It is the one JSON form of a flow: the JSON sink writes it,
// `loupe flows --json` prints it, the Kafka exporter sends it. It appends
// by hand, allocating nothing, because a sink encodes every record.
func AppendJSON(b []byte, r *Record) []byte {
	b = append(b, '{')
	start := len(b)
	for i := range fields {
		f := &fields[i]
		if f.Optional && !f.AppliesTo(r) {
			continue
		}
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, f.Name...)
		b = append(b, '"', ':')
		b = f.appendJSON(b, r)
	}
	return append(b, '}')
}

// appendJSON appends the field's value in r.
func (f *Field) appendJSON(b []byte, r *Record) []byte {
	switch f.Type {
	case TypeUint:
		return strconv.AppendUint(b, f.Uint(r), 10)
	case TypeDirection:
		b = append(b, '"')
		b = append(b, Direction(f.Uint(r)).String()...)
		return append(b, '"')
	case TypeString:
		return strconv.AppendQuote(b, *f.Str(r))
	case TypeMAC:
		b = append(b, '"')
		b = AppendMAC(b, f.MAC(r))
		return append(b, '"')
	case TypeAddr:
		a := addrOf(r.EtherType, *f.Addr(r))
		if !a.IsValid() {
			return append(b, `""`...)
		}
		b = append(b, '"')
		b = a.AppendTo(b)
		return append(b, '"')
	case TypeTime:
		b = append(b, '"')
		b = AppendTime(b, *f.Time(r))
		return append(b, '"')
	case TypeAccuracy:
		b = append(b, '"')
		b = append(b, Accuracy(f.Uint(r)).String()...)
		return append(b, '"')
	case TypeFloat:
		if v := *f.Float(r); !math.IsNaN(v) && !math.IsInf(v, 0) {
			// The shortest form that reads back as the same float64.
			return strconv.AppendFloat(b, v, 'g', -1, 64)
		}
	case TypeEnum:
		return strconv.AppendQuote(b, f.Enum.Name(f.Uint(r)))
	case TypeIP:
		a := *f.IP(r)
		if !a.IsValid() {
			return append(b, `""`...)
		}
		b = append(b, '"')
		b = a.AppendTo(b)
		return append(b, '"')
	case TypeCounts:
		return f.Counts(r).AppendJSON(b)
	}
	return append(b, "null"...)
}

// AppendJSON appends the reasons as their JSON object, names sorted:
// {"NETFILTER_DROP":3,"NO_SOCKET":1}.
func (d DropReasons) AppendJSON(b []byte) []byte {
	var buf [16]string
	b = append(b, '{')
	for i, n := range d.AppendNames(buf[:0]) {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, n)
		b = append(b, ':')
		b = strconv.AppendUint(b, d[n], 10)
	}
	return append(b, '}')
}

// AppendTime appends t in TimeLayout. It writes the digits itself: the
// general time.Time.AppendFormat took half of AppendJSON's time, for two
// timestamps a record.
func AppendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, TimeLayout)
	}
	hour, minute, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond(), 9)
	return append(b, 'Z')
}

// appendDigits appends the n lowest decimal digits of v >= 0, zero padded.
func appendDigits(b []byte, v, n int) []byte {
	start := len(b)
	for range n {
		b = append(b, '0')
	}
	for i := len(b) - 1; i >= start && v > 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

// AppendMAC appends m as net.HardwareAddr.String does (02:00:5e:10:00:01),
// without allocating.
func AppendMAC(b []byte, m *[6]byte) []byte {
	const hex = "0123456789abcdef"
	for i, o := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[o>>4], hex[o&0xf])
	}
	return b
}

// UnmarshalJSON decodes the form AppendJSON writes, for tools and tests.
// Fields it does not know are ignored and missing fields are zero, so it
// reads the records of older and newer agents alike.
func (r *Record) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*r = Record{}
	for i := range fields {
		f := &fields[i]
		raw, ok := m[f.Name]
		if !ok {
			continue
		}
		if err := f.parseJSON(r, raw); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		f.MarkPresent(r)
	}
	return nil
}

// parseJSON sets the field in r from its JSON value. Addresses are set
// whatever the EtherType (which may come later in the object).
func (f *Field) parseJSON(r *Record, raw json.RawMessage) error {
	if f.Type == TypeUint {
		var v uint64
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		if f.Bits < 64 && v>>f.Bits != 0 {
			return fmt.Errorf("%d does not fit in %d bits", v, f.Bits)
		}
		f.SetUint(r, v)
		return nil
	}
	if f.Type == TypeFloat {
		return json.Unmarshal(raw, f.Float(r))
	}
	if f.Type == TypeCounts {
		var c DropReasons
		if err := json.Unmarshal(raw, &c); err != nil {
			return err
		}
		if c == nil {
			c = DropReasons{} // present, if empty: null is {}
		}
		*f.Counts(r) = c
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	switch f.Type {
	case TypeDirection:
		d, err := ParseDirection(s)
		if err != nil {
			return err
		}
		f.SetUint(r, uint64(d))
	case TypeAccuracy:
		a, err := ParseAccuracy(s)
		if err != nil {
			return err
		}
		f.SetUint(r, uint64(a))
	case TypeEnum:
		v, err := f.Enum.Parse(s)
		if err != nil {
			return err
		}
		f.SetUint(r, v)
	case TypeIP:
		if s == "" {
			return nil
		}
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Zone() != "" {
			return fmt.Errorf("bad address %q", s)
		}
		*f.IP(r) = ip
	case TypeString:
		f.SetString(r, s)
	case TypeMAC:
		hw, err := net.ParseMAC(s)
		if err != nil || len(hw) != 6 {
			return fmt.Errorf("bad MAC address %q", s)
		}
		copy(f.MAC(r)[:], hw)
	case TypeAddr:
		if s == "" {
			return nil
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("bad address %q", s)
		}
		*f.Addr(r) = ip.As16()
	case TypeTime:
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return err
		}
		*f.Time(r) = t
	}
	return nil
}
