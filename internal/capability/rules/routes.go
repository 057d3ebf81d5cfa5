package rules

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"loupe/internal/api"
	ruleset "loupe/internal/rules"
)

// RulesPath is the rules' control API path (docs/api.md).
const RulesPath = api.Prefix + "rules"

// List is the body of GET /api/v1/rules, and the answer to every change:
// the rules in force, best-first order being the file's, with what each
// matched since the agent started.
type List struct {
	Rules []RuleStatus `json:"rules"`
}

// AddRequest is the body of POST /api/v1/rules: one rule, as a line of a
// rules file.
type AddRequest struct {
	Rule string `json:"rule"`
}

// ReplaceRequest is the body of PUT /api/v1/rules: a whole rules file,
// which replaces the set in force at once.
type ReplaceRequest struct {
	Text string `json:"text"`
}

func (u *Unit) routes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: RulesPath, Access: api.Read, Handler: http.HandlerFunc(u.list)},
		{Method: http.MethodPost, Path: RulesPath, Access: api.Write, Handler: http.HandlerFunc(u.add)},
		{Method: http.MethodPut, Path: RulesPath, Access: api.Write, Handler: http.HandlerFunc(u.replace)},
		{Method: http.MethodDelete, Path: RulesPath + "/{id}", Access: api.Write, Handler: http.HandlerFunc(u.remove)},
	}
}

func (u *Unit) writeList(w http.ResponseWriter, code int) {
	rs, _, err := u.snapshot()
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	api.WriteJSON(w, code, List{Rules: rs})
}

func (u *Unit) list(w http.ResponseWriter, _ *http.Request) { u.writeList(w, http.StatusOK) }

// decode reads a JSON body of at most 1 MiB into v.
func decode(w http.ResponseWriter, r *http.Request, v any, want string) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		api.WriteError(w, http.StatusBadRequest, "body: want "+want+": "+err.Error())
		return false
	}
	return true
}

func (u *Unit) add(w http.ResponseWriter, r *http.Request) {
	var req AddRequest
	if !decode(w, r, &req, `{"rule": "dst=10.0.0.0/8 dport=873 skip"}`) {
		return
	}
	rule, err := ruleset.ParseRule(req.Rule)
	if err != nil {
		api.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := u.apply(func(s ruleset.Set) (ruleset.Set, error) { return s.Add(rule) }); err != nil {
		api.WriteError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	u.log.Info("rule added", "id", rule.ID, "rule", rule.String())
	u.writeList(w, http.StatusCreated)
}

func (u *Unit) replace(w http.ResponseWriter, r *http.Request) {
	var req ReplaceRequest
	if !decode(w, r, &req, `{"text": "the rules file's lines"}`) {
		return
	}
	next, err := ruleset.ParseFile(strings.NewReader(req.Text))
	if err != nil {
		api.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := u.apply(func(ruleset.Set) (ruleset.Set, error) { return next, nil }); err != nil {
		api.WriteError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	u.log.Info("rules replaced", "rules", next.Len())
	u.writeList(w, http.StatusOK)
}

func (u *Unit) remove(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := u.apply(func(s ruleset.Set) (ruleset.Set, error) { return s.Delete(id) }); err != nil {
		api.WriteError(w, http.StatusNotFound, err.Error())
		return
	}
	u.log.Info("rule deleted", "id", id)
	u.writeList(w, http.StatusOK)
}
