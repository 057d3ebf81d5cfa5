package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Set is an ordered, valid rule set: a rule's slot is its index, and the
// lowest slot wins among rules of equal prefix length. Sets are values: the
// operations return a new Set and leave the old one as it was, so a set in
// force is never changed under the datapath's feet. The zero Set is empty.
type Set struct {
	rules []Rule
	lines []int // the line each rule came from in its file; 0: not from a file
}

// NewSet checks rules (as ParseFile checks a file's) and returns them as a
// Set, in that order; rules without an id get their generated one.
func NewSet(rules ...Rule) (Set, error) {
	rs := make([]Rule, 0, len(rules))
	texts := make([]string, 0, len(rules))
	var errs []error
	for _, r := range rules {
		n, err := r.normalize()
		if err != nil {
			errs = append(errs, &LineError{Text: r.String(), Err: err})
			continue
		}
		rs = append(rs, n)
		texts = append(texts, n.String())
	}
	s, serrs := buildSet(rs, make([]int, len(rs)), texts)
	if errs = append(errs, serrs...); len(errs) > 0 {
		return Set{}, errors.Join(errs...)
	}
	return s, nil
}

// buildSet checks what only a whole set can get wrong: its size, ids used
// twice and rules with the same match terms (the second could never
// decide a packet). texts are the rules as written, for the errors.
func buildSet(rules []Rule, lines []int, texts []string) (Set, []error) {
	s := Set{rules: rules, lines: lines}
	var errs []error
	if len(rules) > MaxRules {
		errs = append(errs, &LineError{Line: lines[MaxRules], Text: texts[MaxRules],
			Err: fmt.Errorf("more than %d rules (RULES_MAX): the set has %d", MaxRules, len(rules))})
	}
	ids := make(map[string]int, len(rules))
	matches := make(map[string]int, len(rules))
	for i, r := range rules {
		if j, ok := ids[r.ID]; ok {
			errs = append(errs, &LineError{Line: lines[i], Text: texts[i],
				Err: fmt.Errorf("id %q is already used by %s", r.ID, s.where(j))})
		} else {
			ids[r.ID] = i
		}
		k := r.matchKey()
		if j, ok := matches[k]; ok {
			errs = append(errs, &LineError{Line: lines[i], Text: texts[i],
				Err: fmt.Errorf("the same match terms as %s, which comes first: this rule could never apply", s.where(j))})
		} else {
			matches[k] = i
		}
	}
	if len(errs) > 0 {
		return Set{}, errs
	}
	return s, nil
}

// where names the rule at slot i for an error message.
func (s Set) where(i int) string {
	if s.lines[i] > 0 {
		return fmt.Sprintf("line %d", s.lines[i])
	}
	return fmt.Sprintf("rule %d (id=%s)", i+1, s.rules[i].ID)
}

// mergeByLine puts errors in line order; those without a line go last.
func mergeByLine(a, b []error) []error {
	all := append(slices.Clip(a), b...)
	line := func(err error) int {
		var le *LineError
		if errors.As(err, &le) && le.Line > 0 {
			return le.Line
		}
		return int(^uint(0) >> 1)
	}
	slices.SortStableFunc(all, func(x, y error) int { return line(x) - line(y) })
	return all
}

// Len is the number of rules.
func (s Set) Len() int { return len(s.rules) }

// Rules returns the rules by slot (a copy).
func (s Set) Rules() []Rule { return slices.Clone(s.rules) }

// Rule returns the rule at slot i.
func (s Set) Rule(i int) Rule { return s.rules[i] }

// Line is the line of its file the rule at slot i came from, 0 if it came
// from elsewhere (Add, JSON).
func (s Set) Line(i int) int { return s.lines[i] }

// Lookup returns the slot of the rule with that id.
func (s Set) Lookup(id string) (slot int, ok bool) {
	for i, r := range s.rules {
		if r.ID == id {
			return i, true
		}
	}
	return 0, false
}

// String is the set as a rule file: one canonical rule a line.
func (s Set) String() string {
	var b strings.Builder
	for _, r := range s.rules {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Add returns the set with r appended (the lowest precedence among rules of
// its prefix length). It fails if r is invalid, its id is taken, its match
// terms are another rule's, or the set is full.
func (s Set) Add(r Rule) (Set, error) {
	n, err := r.normalize()
	if err != nil {
		return s, &LineError{Text: r.String(), Err: err}
	}
	rules := append(slices.Clip(s.rules), n)
	lines := append(slices.Clip(s.lines), 0)
	texts := make([]string, len(rules))
	texts[len(texts)-1] = n.String()
	ns, errs := buildSet(rules, lines, texts)
	if len(errs) > 0 {
		return s, errors.Join(errs...)
	}
	return ns, nil
}

// Delete returns the set without the rule of that id; the rules after it
// move up one slot.
func (s Set) Delete(id string) (Set, error) {
	i, ok := s.Lookup(id)
	if !ok {
		return s, fmt.Errorf("no rule with id %q", id)
	}
	return Set{
		rules: slices.Delete(slices.Clone(s.rules), i, i+1),
		lines: slices.Delete(slices.Clone(s.lines), i, i+1),
	}, nil
}

// Change says what a replacement did, by rule id: the ids only the new set
// has, those only the old one had, those whose rule differs (an id given in
// the file, with other terms or action), and those kept as they were.
// Generated ids hash the rule's text, so an unchanged rule keeps its id.
type Change struct {
	Added, Removed, Changed, Kept []string
}

// Replace returns n, which takes the place of s as a whole, and how the two
// differ.
func (s Set) Replace(n Set) (Set, Change) {
	var c Change
	old := make(map[string]Rule, len(s.rules))
	for _, r := range s.rules {
		old[r.ID] = r
	}
	for _, r := range n.rules {
		o, ok := old[r.ID]
		switch {
		case !ok:
			c.Added = append(c.Added, r.ID)
		case o != r:
			c.Changed = append(c.Changed, r.ID)
		default:
			c.Kept = append(c.Kept, r.ID)
		}
		delete(old, r.ID)
	}
	for _, r := range s.rules {
		if _, ok := old[r.ID]; ok {
			c.Removed = append(c.Removed, r.ID)
		}
	}
	return n, c
}

type setJSON struct {
	Rules []Rule `json:"rules"`
}

// MarshalJSON encodes the set as {"rules": [rule, ...]}, by slot.
func (s Set) MarshalJSON() ([]byte, error) {
	rs := s.rules
	if rs == nil {
		rs = []Rule{}
	}
	return json.Marshal(setJSON{Rules: rs})
}

// UnmarshalJSON decodes what MarshalJSON encodes, with every check NewSet
// makes.
func (s *Set) UnmarshalJSON(b []byte) error {
	var j setJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	n, err := NewSet(j.Rules...)
	if err != nil {
		return err
	}
	*s = n
	return nil
}
