package config

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"loupe/internal/config/check"
)

// Flags is the set of configuration flags bound to a flag.FlagSet.
type Flags struct {
	fs          *flag.FlagSet
	configPath  string
	printConfig bool
	// vals receives the parsed flag values. Load copies only the keys
	// whose flags were set (FlagSet.Visit), so an unset flag's default
	// never hides a value from the file or the environment.
	vals   Config
	byFlag map[string]field
}

// BindFlags defines on fs a flag for every key of Config, plus --config and
// --print-config, and returns the handle Load reads them from after
// fs.Parse. The help of each flag names its YAML key and environment
// variable.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs, vals: Default(), byFlag: make(map[string]field)}
	fs.StringVar(&f.configPath, "config", "", "read the configuration from YAML `file`; environment variables and flags override it")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration as YAML and exit")
	for _, fd := range fields() {
		f.byFlag[fd.flag] = fd
		usage := fmt.Sprintf("%s (%s, %s)", fd.help, fd.key, fd.env)
		switch p := fd.ptr(&f.vals).(type) {
		case *string:
			fs.StringVar(p, fd.flag, *p, withArg(usage, fd.arg))
		case *int:
			fs.IntVar(p, fd.flag, *p, usage)
		case *bool:
			fs.BoolVar(p, fd.flag, *p, usage)
		case *time.Duration:
			fs.DurationVar(p, fd.flag, *p, usage)
		case *uint64:
			fs.Var(&sizeValue{p}, fd.flag, withArg(usage, fd.arg))
		case *[]string:
			usage = fmt.Sprintf("%s; repeatable, comma-separated (%s, %s)", fd.help, fd.key, fd.env)
			fs.Var(&listValue{p: p}, fd.flag, withArg(usage, fd.arg))
		}
	}
	return f
}

// withArg back-quotes the first occurrence of the word arg in usage, which
// is how the flag package learns the placeholder to print (-iface glob)
// for a flag.Value it cannot name. Struct tags cannot hold back quotes,
// hence this step.
func withArg(usage, arg string) string {
	if arg == "" {
		return usage
	}
	return strings.Replace(usage, arg, "`"+arg+"`", 1)
}

// ConfigPath returns the value of --config, "" if unset or f is nil.
func (f *Flags) ConfigPath() string {
	if f == nil {
		return ""
	}
	return f.configPath
}

// PrintConfig reports whether --print-config was given: the caller should
// print the result of Load (Config.String) and exit.
func (f *Flags) PrintConfig() bool {
	return f != nil && f.printConfig
}

// apply overlays the flags the user set on cfg, checking each value.
func (f *Flags) apply(cfg *Config) error {
	if f == nil {
		return nil
	}
	var err error
	f.fs.Visit(func(fl *flag.Flag) {
		fd, ok := f.byFlag[fl.Name]
		if !ok || err != nil {
			return // --config, --print-config or a flag of the caller
		}
		v := fd.get(&f.vals)
		if e := fd.check(v); e != nil {
			err = fmt.Errorf("config: flag --%s: %s: %w", fl.Name, fd.key, e)
			return
		}
		fd.set(cfg, v)
	})
	return err
}

// listValue is a repeatable list flag; each use may hold several
// comma-separated elements.
type listValue struct {
	p   *[]string
	set bool // the first Set replaces the default rather than appending
}

func (v *listValue) String() string {
	if v == nil || v.p == nil {
		return "" // zero value, as the flag package builds to find defaults
	}
	return strings.Join(*v.p, ",")
}

func (v *listValue) Set(s string) error {
	if !v.set {
		*v.p, v.set = nil, true
	}
	*v.p = splitList(*v.p, s)
	return nil
}

// sizeValue is a byte size flag: 4096, 64KiB, 4MiB.
type sizeValue struct{ p *uint64 }

func (v *sizeValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return check.FormatSize(*v.p)
}

func (v *sizeValue) Set(s string) error {
	n, err := check.ParseSize(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}
