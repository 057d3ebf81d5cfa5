// Package check holds the value rules and formats that every section of the
// configuration shares: ranges, choices, byte sizes and durations in the
// syntax the configuration reads, and the quoting of a value in a message.
//
// It is a leaf package so that each exporter can check its own keys with the
// same wording as the agent's, without importing the config package (which
// imports the exporters' sections).
package check

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxQuoted is the most bytes of a value that Quote shows. A configuration
// value can be megabytes long (a mistaken file in place of a name); an
// error message must stay one readable line.
const MaxQuoted = 64

// Quote returns s quoted as %q does, cut after MaxQuoted bytes (at a rune
// boundary) with its full length said: "aaaa"... (20971520 bytes).
func Quote(s string) string {
	head, cut := cutAt(s)
	if !cut {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(head), len(s))
}

// Cut returns s cut like Quote, without quotes: for names (an unknown
// environment variable) that messages show bare.
func Cut(s string) string {
	head, cut := cutAt(s)
	if !cut {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", head, len(s))
}

// cutAt returns the first MaxQuoted bytes of s, fewer to end on a rune
// boundary, and whether that is shorter than s.
func cutAt(s string) (string, bool) {
	if len(s) <= MaxQuoted {
		return s, false
	}
	n := MaxQuoted
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// MaxPath is the longest path Linux accepts (PATH_MAX, the terminating
// NUL included).
const MaxPath = 4095

// Path checks a file or directory name the configuration gives: a longer
// one could only fail later, in a message that shows it whole.
func Path(p string) error {
	switch {
	case len(p) > MaxPath:
		return fmt.Errorf("%d bytes long: longer than %d, the longest path Linux accepts", len(p), MaxPath)
	case strings.ContainsRune(p, 0):
		return errors.New("contains a NUL byte")
	}
	return nil
}

// Int checks min <= n <= max.
func Int(n, min, max int) error {
	if n < min || n > max {
		return fmt.Errorf("must be between %d and %d, got %d", min, max, n)
	}
	return nil
}

// OneOf checks that v is one of allowed.
func OneOf(v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("must be one of %s, got %s", strings.Join(allowed, ", "), Quote(v))
}

// NotEmpty checks that v is not empty.
func NotEmpty(v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// Duration checks min <= d and, if max is not zero, d <= max.
func Duration(d, min, max time.Duration) error {
	switch {
	case max != 0 && (d < min || d > max):
		return fmt.Errorf("must be between %s and %s, got %s", FormatDuration(min), FormatDuration(max), FormatDuration(d))
	case d < min:
		return fmt.Errorf("must be at least %s, got %s", FormatDuration(min), FormatDuration(d))
	}
	return nil
}

// Size checks min <= n <= max, in the size syntax.
func Size(n, min, max uint64) error {
	if n < min || n > max {
		return fmt.Errorf("must be between %s and %s, got %s", FormatSize(min), FormatSize(max), FormatSize(n))
	}
	return nil
}

// DurationSyntax says what a valid duration looks like.
const DurationSyntax = "want Go syntax such as 500ms, 5s, 1h30m"

// ParseDuration parses a duration in Go syntax, with an error that says
// what one looks like.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %s (%s)", Quote(s), DurationSyntax)
	}
	return d, nil
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

// ParseSize parses a byte count: "4096", "64KiB", "4MiB", "1GiB".
func ParseSize(s string) (uint64, error) {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range sizeUnits() {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %s (want bytes, or a number with a KiB, MiB or GiB suffix)", Quote(s))
	}
	if n > 0 && bits.LeadingZeros64(n) < int(shift) {
		return 0, fmt.Errorf("size %s overflows 64 bits", Quote(s))
	}
	return n << shift, nil
}

// FormatSize is the inverse of ParseSize, using the largest exact unit.
func FormatSize(n uint64) string {
	for _, u := range sizeUnits() {
		if unit := uint64(1) << u.shift; n >= unit && n%unit == 0 {
			return strconv.FormatUint(n/unit, 10) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10)
}

// FormatDuration is time.Duration.String without the zero tails that make
// 24h print as 24h0m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// ReadFile reads a file the configuration names (the configuration file, a
// password or header file), refusing one larger than limit bytes: a
// mistaken path (/dev/zero, a log file) must fail at once, not fill the
// memory.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %s, the limit for this file", FormatSize(uint64(limit)))
	}
	return data, nil
}
