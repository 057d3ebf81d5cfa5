package config

import (
	"fmt"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// kind is the syntax of a key's value, derived from its Go type.
type kind int

const (
	kindString   kind = iota // string
	kindList                 // []string; comma-separated in env and flags
	kindInt                  // int
	kindDuration             // time.Duration, Go syntax
	kindSize                 // uint64, bytes with an optional KiB/MiB/GiB suffix
	kindBool                 // bool: true or false
)

// field describes one leaf key of Config, read from its struct tags.
type field struct {
	key   string // YAML path, dotted for nested keys: "store.path"
	env   string
	flag  string
	help  string
	arg   string // flag usage placeholder for types the flag package cannot name
	kind  kind
	index []int // reflect field index path from Config
}

// get returns the value of f in c.
func (f field) get(c *Config) any {
	return reflect.ValueOf(c).Elem().FieldByIndex(f.index).Interface()
}

// set stores v, which must have f's Go type, in c.
func (f field) set(c *Config, v any) {
	reflect.ValueOf(c).Elem().FieldByIndex(f.index).Set(reflect.ValueOf(v))
}

// ptr returns a pointer to f's field in c, for flag binding.
func (f field) ptr(c *Config) any {
	return reflect.ValueOf(c).Elem().FieldByIndex(f.index).Addr().Interface()
}

// fields lists the leaf keys of Config in declaration order. It is rebuilt
// on each call instead of cached in a package variable: it is cheap, runs a
// handful of times per process, and keeps the package free of global state.
// A malformed tag is a programming error, caught by the tests, so it panics.
func fields() []field {
	var out []field
	// A section's env and flag tags, if any, prefix its keys' tags, so
	// that one struct (TLS) can serve several sections.
	var walk func(t reflect.Type, prefix, envPrefix, flagPrefix string, index []int)
	walk = func(t reflect.Type, prefix, envPrefix, flagPrefix string, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			name := sf.Tag.Get("yaml")
			if name == "" {
				panic(fmt.Sprintf("config: field %s has no yaml tag", sf.Name))
			}
			idx := append(append([]int(nil), index...), i)
			if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[time.Duration]() {
				walk(sf.Type, prefix+name+".", envPrefix+sf.Tag.Get("env"), flagPrefix+sf.Tag.Get("flag"), idx)
				continue
			}
			f := field{
				key:   prefix + name,
				env:   envPrefix + sf.Tag.Get("env"),
				flag:  flagPrefix + sf.Tag.Get("flag"),
				help:  sf.Tag.Get("help"),
				arg:   sf.Tag.Get("arg"),
				kind:  kindOf(sf.Type),
				index: idx,
			}
			if sf.Tag.Get("env") == "" || sf.Tag.Get("flag") == "" || f.help == "" {
				panic(fmt.Sprintf("config: field %s needs env, flag and help tags", sf.Name))
			}
			out = append(out, f)
		}
	}
	walk(reflect.TypeFor[Config](), "", "", "", nil)
	return out
}

func kindOf(t reflect.Type) kind {
	switch t {
	case reflect.TypeFor[string]():
		return kindString
	case reflect.TypeFor[[]string]():
		return kindList
	case reflect.TypeFor[int]():
		return kindInt
	case reflect.TypeFor[time.Duration]():
		return kindDuration
	case reflect.TypeFor[uint64]():
		return kindSize
	case reflect.TypeFor[bool]():
		return kindBool
	}
	panic(fmt.Sprintf("config: unsupported field type %v", t))
}

// parseText parses the text form of a value, as found in an environment
// variable or a YAML scalar. The result has the field's Go type.
func parseText(k kind, s string) (any, error) {
	switch k {
	case kindList:
		return splitList(nil, s), nil
	case kindInt:
		// Base 10 only: a leading zero must not silently mean octal.
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, strconv.IntSize)
		if err != nil {
			return nil, fmt.Errorf("invalid integer %q", s)
		}
		return int(n), nil
	case kindDuration:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("invalid duration %q (want Go syntax such as 500ms, 5s, 1h30m)", s)
		}
		return d, nil
	case kindSize:
		return parseSize(s)
	case kindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("invalid boolean %q (want true or false)", s)
		}
		return b, nil
	}
	return s, nil
}

// splitList appends the comma-separated, space-trimmed elements of s to
// list. Empty elements are dropped so that an empty variable means an empty
// list and a trailing comma is harmless; an empty result is nil so that
// "no list" has one representation.
//
// One comma is not a separator: inside the host part of a target URL
// (kafka://b1:9092,b2:9092/topic), unless what follows it starts another
// target (otlp://h:4317,json:-).
func splitList(list []string, s string) []string {
	var cur string
	flush := func() {
		if e := strings.TrimSpace(cur); e != "" {
			list = append(list, e)
		}
	}
	for i, part := range strings.Split(s, ",") {
		if i > 0 && inURLHost(cur) && !startsTarget(part) {
			cur += "," + part
			continue
		}
		if i > 0 {
			flush()
		}
		cur = part
	}
	flush()
	return list
}

// inURLHost reports whether e ends inside the host part of a URL: it has a
// "://" with no "/" after it.
func inURLHost(e string) bool {
	_, after, ok := strings.Cut(e, "://")
	return ok && !strings.Contains(after, "/")
}

// startsTarget reports whether s begins with the scheme of an export
// target.
func startsTarget(s string) bool {
	s = strings.TrimSpace(s)
	for _, sc := range exportSchemes() {
		if strings.HasPrefix(s, sc.name+":") {
			return true
		}
	}
	return false
}

type sizeUnit struct {
	suffix string
	shift  uint
}

// sizeUnits returns the accepted size suffixes, largest first. Only binary
// units exist: the ring buffer must be a power of two, which decimal units
// (MB) never are. A function rather than a package variable, so that no
// package state is mutable.
func sizeUnits() [3]sizeUnit {
	return [...]sizeUnit{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}}
}

// parseSize parses a byte count: "4096", "64KiB", "4MiB", "1GiB".
func parseSize(s string) (uint64, error) {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range sizeUnits() {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a number with a KiB, MiB or GiB suffix)", s)
	}
	if n > 0 && bits.LeadingZeros64(n) < int(shift) {
		return 0, fmt.Errorf("size %q overflows 64 bits", s)
	}
	return n << shift, nil
}

// formatSize is the inverse of parseSize, using the largest exact unit.
func formatSize(n uint64) string {
	for _, u := range sizeUnits() {
		if unit := uint64(1) << u.shift; n >= unit && n%unit == 0 {
			return strconv.FormatUint(n/unit, 10) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10)
}

// formatDuration is time.Duration.String without the zero tails that make
// 24h print as 24h0m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// formatText renders a value in the syntax parseText reads back.
func formatText(k kind, v any) string {
	switch k {
	case kindList:
		return strings.Join(v.([]string), ",")
	case kindInt:
		return strconv.Itoa(v.(int))
	case kindDuration:
		return formatDuration(v.(time.Duration))
	case kindSize:
		return formatSize(v.(uint64))
	case kindBool:
		return strconv.FormatBool(v.(bool))
	}
	return v.(string)
}
