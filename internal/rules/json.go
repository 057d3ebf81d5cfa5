package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ruleJSON is a rule as the control API carries it. The field names are a
// contract with the CLI and scripts; the values are spelled as in the rule
// language, and text is the canonical rule.
type ruleJSON struct {
	ID        string `json:"id,omitempty"`
	Src       string `json:"src,omitempty"`
	Dst       string `json:"dst,omitempty"`
	Net       string `json:"net,omitempty"`
	Proto     string `json:"proto,omitempty"`
	Port      string `json:"port,omitempty"`
	Sport     string `json:"sport,omitempty"`
	Dport     string `json:"dport,omitempty"`
	Dir       string `json:"dir,omitempty"`
	Iface     string `json:"iface,omitempty"`
	Flags     string `json:"flags,omitempty"`
	Action    string `json:"action,omitempty"`
	Sample    uint16 `json:"sample,omitempty"`
	Aggregate *uint8 `json:"aggregate,omitempty"` // /0 is an aggregation
	Text      string `json:"text,omitempty"`
}

// MarshalJSON encodes the rule field by field, with its canonical text.
func (r Rule) MarshalJSON() ([]byte, error) {
	j := ruleJSON{ID: r.ID, Text: r.String()}
	for _, t := range r.matchTerms() {
		k, v, _ := strings.Cut(t, "=")
		*j.field(k) = v
	}
	j.Action = [...]string{"measure", "skip", "sample", "aggregate"}[r.Action&3]
	switch r.Action {
	case ActionSample:
		j.Sample = r.SampleN
	case ActionAggregate:
		p := r.AggPrefix
		j.Aggregate = &p
	}
	return json.Marshal(j)
}

func (j *ruleJSON) field(key string) *string {
	switch key {
	case "id":
		return &j.ID
	case "src":
		return &j.Src
	case "dst":
		return &j.Dst
	case "net":
		return &j.Net
	case "proto":
		return &j.Proto
	case "port":
		return &j.Port
	case "sport":
		return &j.Sport
	case "dport":
		return &j.Dport
	case "dir":
		return &j.Dir
	case "iface":
		return &j.Iface
	case "flags":
		return &j.Flags
	}
	panic("rules: no JSON field for key " + key)
}

// UnmarshalJSON decodes a rule from its fields, or from text alone (as a
// client that only has a rule's text sends it); given both, they must say
// the same rule. Either way the rule language's checks apply.
func (r *Rule) UnmarshalJSON(b []byte) error {
	// A misspelt field would otherwise be dropped, and the rule match more
	// than its author meant.
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var j ruleJSON
	if err := d.Decode(&j); err != nil {
		return fmt.Errorf("rule: %w", err)
	}
	var toks []string
	if j.ID != "" {
		toks = append(toks, "id="+j.ID)
	}
	for _, k := range keys[1:] { // the match terms, in canonical order
		if v := *j.field(k); v != "" {
			toks = append(toks, k+"="+v)
		}
	}
	hasFields := len(toks) > 0 && (j.ID == "" || len(toks) > 1) ||
		j.Action != "" || j.Sample != 0 || j.Aggregate != nil
	var fromText Rule
	if j.Text != "" {
		var err error
		if fromText, err = ParseRule(j.Text); err != nil {
			return err
		}
		if !hasFields {
			if j.ID != "" && j.ID != fromText.ID {
				return fmt.Errorf("rule id %q and text %q disagree", j.ID, j.Text)
			}
			*r = fromText
			return nil
		}
	}
	switch j.Action {
	case "", "measure", "skip":
		if j.Sample != 0 || j.Aggregate != nil {
			return fmt.Errorf("sample or aggregate given with action %q", j.Action)
		}
		if j.Action != "" {
			toks = append(toks, j.Action)
		}
	case "sample":
		toks = append(toks, "sample", "1:"+strconv.Itoa(int(j.Sample)))
	case "aggregate":
		if j.Aggregate == nil {
			return errors.New(`action "aggregate" without "aggregate" (its prefix length)`)
		}
		toks = append(toks, "aggregate", "/"+strconv.Itoa(int(*j.Aggregate)))
	default:
		return unknown("action", j.Action, actions)
	}
	if len(toks) == 0 {
		return errors.New("a rule with neither fields nor text")
	}
	n, err := ParseRule(strings.Join(toks, " "))
	if err != nil {
		return err
	}
	if j.Text != "" && fromText != n {
		return fmt.Errorf("rule fields (%s) and text %q disagree", n, j.Text)
	}
	*r = n
	return nil
}
