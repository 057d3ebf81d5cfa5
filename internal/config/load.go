package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"gopkg.in/yaml.v3"

	"loupe/internal/config/check"
)

// MaxFileSize bounds the configuration file: a real one is a few KiB, and
// a mistaken path (/dev/zero, a log file) must fail at once rather than
// fill the memory.
const MaxFileSize = 1 << 20

// envPrefix marks the environment variables that belong to Loupe. Any other
// variable is ignored; an unknown one with this prefix is an error.
const envPrefix = "LOUPE_"

// Load builds the effective configuration: Default, then the YAML file
// flags.ConfigPath() if set, then the LOUPE_* variables in environ (in
// os.Environ form, "KEY=value"), then the flags the user set; and
// validates the result. flags may be nil (no file, no flags).
//
// A value is checked in the layer it comes from, even if a later layer
// overrides it: a broken file is reported whatever the environment.
func Load(flags *Flags, environ []string) (Config, error) {
	cfg := Default()
	if p := flags.ConfigPath(); p != "" {
		data, err := check.ReadFile(p, MaxFileSize)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is already in our prefix
			}
			return Config{}, fmt.Errorf("config file %s: %w", p, err)
		}
		if err := decodeYAML(&cfg, data); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", p, err)
		}
	}
	if err := applyEnv(&cfg, environ); err != nil {
		return Config{}, err
	}
	if err := flags.apply(&cfg); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeYAML overlays the YAML document data on cfg. It walks the node
// tree itself instead of unmarshalling into Config so that it can name the
// full key and line of an unknown or invalid entry, accept sizes as
// integers or strings, and read durations in Go syntax.
func decodeYAML(cfg *Config, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file or only comments: all defaults
		}
		return yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return fmt.Errorf("line %d: more than one YAML document", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return yamlError(err)
	}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolve(root.Content[0])
	}
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of keys at the top level, got %s", root.Line, describe(root))
	}
	byKey := make(map[string]field)
	for _, f := range fields() {
		byKey[f.key] = f
	}
	return decodeMapping(cfg, root, "", byKey)
}

// decodeMapping decodes the mapping m whose keys are under prefix ("" at
// the top level, "store." inside store).
func decodeMapping(cfg *Config, m *yaml.Node, prefix string, byKey map[string]field) error {
	seen := make(map[string]int)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := resolve(m.Content[i]), resolve(m.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: keys must be plain names, got %s", k.Line, describe(k))
		}
		key := prefix + k.Value
		if strings.Contains(k.Value, ".") {
			// Only nesting reaches store.path; a literal dotted key
			// would otherwise match it by accident.
			return fmt.Errorf("line %d: unknown key %s", k.Line, check.Quote(key))
		}
		if line, dup := seen[key]; dup {
			return fmt.Errorf("line %d: duplicate key %s (first at line %d)", k.Line, check.Quote(key), line)
		}
		seen[key] = k.Line
		if f, ok := byKey[key]; ok {
			if err := decodeValue(cfg, f, v); err != nil {
				return err
			}
			continue
		}
		if isSection(key, byKey) {
			if isNull(v) {
				continue // "store:" with nothing under it
			}
			if v.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: %s: want a mapping of keys, got %s", v.Line, key, describe(v))
			}
			if err := decodeMapping(cfg, v, key+".", byKey); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("line %d: unknown key %s", k.Line, check.Quote(key))
	}
	return nil
}

// isSection reports whether key is a nested section such as "store".
func isSection(key string, byKey map[string]field) bool {
	for k := range byKey {
		if strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// decodeValue decodes the node of one leaf key. A null value (`key:` or
// `key: ~`) leaves the key at its current value, as if it were absent.
func decodeValue(cfg *Config, f field, n *yaml.Node) error {
	if isNull(n) {
		return nil
	}
	var v any
	switch {
	case f.kind == kindList:
		if n.Kind != yaml.SequenceNode {
			return fmt.Errorf("line %d: %s: want a list such as [a, b], got %s", n.Line, f.key, describe(n))
		}
		var list []string
		for _, e := range n.Content {
			e = resolve(e)
			if e.Kind != yaml.ScalarNode || isNull(e) {
				return fmt.Errorf("line %d: %s: list elements must be strings, got %s", e.Line, f.key, describe(e))
			}
			list = append(list, e.Value)
		}
		v = list
	case n.Kind != yaml.ScalarNode:
		return fmt.Errorf("line %d: %s: want a single value, got %s", n.Line, f.key, describe(n))
	default:
		var err error
		if v, err = parseText(f.kind, n.Value); err != nil {
			return fmt.Errorf("line %d: %s: %w", n.Line, f.key, err)
		}
	}
	if err := f.check(v); err != nil {
		return fmt.Errorf("line %d: %s: %w", n.Line, f.key, err)
	}
	f.set(cfg, v)
	return nil
}

// resolve follows aliases (*anchor) to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return check.Quote(n.Value)
	}
	return "an unexpected node"
}

// yamlError drops the "yaml: " prefix: our prefix already says the file is
// YAML, and the rest ("line 3: ...") then reads like our own errors.
func yamlError(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
}

// applyEnv overlays the LOUPE_* variables of environ on cfg. An empty value
// counts as set: LOUPE_INTERFACES= clears a list given in the file.
func applyEnv(cfg *Config, environ []string) error {
	byEnv := make(map[string]field)
	for _, f := range fields() {
		byEnv[f.env] = f
	}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) {
			continue
		}
		f, ok := byEnv[name]
		if !ok {
			return fmt.Errorf("config: unknown environment variable %s", check.Cut(name))
		}
		v, err := parseText(f.kind, value)
		if err == nil {
			err = f.check(v)
		}
		if err != nil {
			return fmt.Errorf("config: environment variable %s: %s: %w", name, f.key, err)
		}
		f.set(cfg, v)
	}
	return nil
}
