package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"loupe/internal/config/check"
	"loupe/internal/export/targets"
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

// keyChecker is implemented by Config and by every section that checks its
// own keys. CheckKey checks the current value of key, named relative to
// the section ("tls.ca_file" in kafka), and returns a message that does
// not name it.
type keyChecker interface {
	CheckKey(key string) error
}

// validator is implemented by sections with rules over several keys that
// hold whatever else is configured. CheckKeys's message starts with the
// key it blames, relative to the section ("keys: ..."). Rules that only
// matter once the exporter is used (Kafka's SASL settings go together)
// are the exporter's to check when it starts: every key can be set alone.
type validator interface {
	CheckKeys() error
}

// field describes one leaf key of Config, read from its struct tags.
type field struct {
	key    string // YAML path, dotted for nested keys: "store.path"
	env    string
	flag   string
	help   string
	arg    string // flag usage placeholder for types the flag package cannot name
	secret string // "value": the dump redacts the values of key=value entries
	kind   kind
	index  []int // reflect field index path from Config
	// owner is the index path of the innermost struct holding the key
	// that implements keyChecker (nil: Config), and rel the key relative
	// to it.
	owner []int
	rel   string
}

// section is a struct of Config with rules over several keys.
type section struct {
	prefix string // "kafka.", "kafka.tls."
	index  []int
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

// checkIn checks f's value in c with its owner's rules.
func (f field) checkIn(c *Config) error {
	return reflect.ValueOf(c).Elem().FieldByIndex(f.owner).Interface().(keyChecker).CheckKey(f.rel)
}

// check checks the value v of f, as read from one layer: it is set in an
// otherwise empty configuration, which is enough since CheckKey looks at
// one key only.
func (f field) check(v any) error {
	var c Config
	f.set(&c, v)
	return f.checkIn(&c)
}

// fields lists the leaf keys of Config in declaration order. It is rebuilt
// on each call instead of cached in a package variable: it is cheap, runs a
// handful of times per process, and keeps the package free of global state.
// A malformed tag is a programming error, caught by the tests, so it panics.
func fields() []field {
	out, _ := walk()
	return out
}

// sections lists the structs of Config that implement validator, outermost
// first.
func sections() []section {
	_, out := walk()
	return out
}

func walk() ([]field, []section) {
	var out []field
	var secs []section
	checker := reflect.TypeFor[keyChecker]()
	// A section's env and flag tags, if any, prefix its keys' tags, so
	// that one struct (tlsconf.Config) can serve several sections.
	var walk func(t reflect.Type, prefix, envPrefix, flagPrefix string, index, owner []int, ownerPrefix string)
	walk = func(t reflect.Type, prefix, envPrefix, flagPrefix string, index, owner []int, ownerPrefix string) {
		if index != nil && t.Implements(checker) {
			owner, ownerPrefix = index, prefix
		}
		if index != nil && t.Implements(reflect.TypeFor[validator]()) {
			secs = append(secs, section{prefix: prefix, index: index})
		}
		for i := range t.NumField() {
			sf := t.Field(i)
			name := sf.Tag.Get("yaml")
			if name == "" {
				panic(fmt.Sprintf("config: field %s has no yaml tag", sf.Name))
			}
			idx := append(append([]int(nil), index...), i)
			if name == ",inline" {
				walk(sf.Type, prefix, envPrefix, flagPrefix, idx, owner, ownerPrefix)
				continue
			}
			if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[time.Duration]() {
				walk(sf.Type, prefix+name+".", envPrefix+sf.Tag.Get("env"), flagPrefix+sf.Tag.Get("flag"), idx, owner, ownerPrefix)
				continue
			}
			f := field{
				key:    prefix + name,
				env:    envPrefix + sf.Tag.Get("env"),
				flag:   flagPrefix + sf.Tag.Get("flag"),
				help:   sf.Tag.Get("help"),
				arg:    sf.Tag.Get("arg"),
				secret: sf.Tag.Get("secret"),
				kind:   kindOf(sf.Type),
				index:  idx,
				owner:  owner,
				rel:    strings.TrimPrefix(prefix+name, ownerPrefix),
			}
			if sf.Tag.Get("env") == "" || sf.Tag.Get("flag") == "" || f.help == "" {
				panic(fmt.Sprintf("config: field %s needs env, flag and help tags", sf.Name))
			}
			out = append(out, f)
		}
	}
	walk(reflect.TypeFor[Config](), "", "", "", nil, nil, "")
	return out, secs
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
			return nil, fmt.Errorf("invalid integer %s", check.Quote(s))
		}
		return int(n), nil
	case kindDuration:
		return check.ParseDuration(s)
	case kindSize:
		return check.ParseSize(s)
	case kindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("invalid boolean %s (want true or false)", check.Quote(s))
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
	for _, name := range targets.Names() {
		if strings.HasPrefix(s, name+":") {
			return true
		}
	}
	return false
}

// formatText renders a value in the syntax parseText reads back.
func formatText(k kind, v any) string {
	switch k {
	case kindList:
		return strings.Join(v.([]string), ",")
	case kindInt:
		return strconv.Itoa(v.(int))
	case kindDuration:
		return check.FormatDuration(v.(time.Duration))
	case kindSize:
		return check.FormatSize(v.(uint64))
	case kindBool:
		return strconv.FormatBool(v.(bool))
	}
	return v.(string)
}
