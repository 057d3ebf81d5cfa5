package jsonl

import (
	"errors"
	"fmt"
	"strings"

	"loupe/internal/config/check"
)

// Scheme is the target scheme of this sink, and Syntax its forms as errors
// and help show them.
const (
	Scheme = "json"
	Syntax = "json:PATH or json:- (stdout)"
)

// CheckTarget checks a json: target (json:PATH or json:-). Its error gives
// the reason alone, for a caller that names the target and the syntax.
func CheckTarget(target string) error {
	_, err := ParseTarget(target)
	return err
}

// ParseTarget returns the path of a json: target, "-" for stdout.
func ParseTarget(target string) (string, error) {
	path, ok := strings.CutPrefix(target, Scheme+":")
	switch {
	case !ok && target == Scheme:
		return "", errors.New("missing path")
	case !ok:
		return "", errors.New("not a json: target")
	case path == "":
		return "", errors.New("missing path")
	}
	if err := check.Path(path); err != nil {
		return "", fmt.Errorf("path %w", err)
	}
	return path, nil
}
