package capture

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"loupe/internal/api"
)

// The capture's control API paths (docs/api.md).
const (
	TriggersPath = api.Prefix + "triggers"
	FollowPath   = api.Prefix + "capture/follow"
)

// TriggerList is the body of GET /api/v1/triggers.
type TriggerList struct {
	Triggers []Trigger `json:"triggers"`
}

// TriggerRequest is the body of POST /api/v1/triggers.
type TriggerRequest struct {
	Trigger string `json:"trigger"`
}

func (u *Unit) routes() []api.Route {
	return []api.Route{
		{Method: http.MethodGet, Path: TriggersPath, Access: api.Read, Handler: http.HandlerFunc(u.listTriggers)},
		{Method: http.MethodPost, Path: TriggersPath, Access: api.Write, Handler: http.HandlerFunc(u.postTrigger)},
		{Method: http.MethodDelete, Path: TriggersPath + "/{name}", Access: api.Write, Handler: http.HandlerFunc(u.deleteTrigger)},
		{Method: http.MethodGet, Path: FollowPath, Access: api.Payload, Stream: true, Handler: http.HandlerFunc(u.serveFollow)},
		{Method: http.MethodPost, Path: CapturePath, Access: api.Payload, Stream: true, Handler: http.HandlerFunc(u.serveCapture)},
	}
}

func (u *Unit) listTriggers(w http.ResponseWriter, _ *http.Request) {
	api.WriteJSON(w, http.StatusOK, TriggerList{Triggers: u.Triggers()})
}

func (u *Unit) postTrigger(w http.ResponseWriter, r *http.Request) {
	var req TriggerRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		api.WriteError(w, http.StatusBadRequest, "body: want {\"trigger\": \"http.status=500-599 ...\"}: "+err.Error())
		return
	}
	t, err := ParseTrigger(req.Trigger)
	if err != nil {
		api.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch err := u.AddTrigger(t); {
	case errors.Is(err, errTriggerExists):
		api.WriteError(w, http.StatusConflict, err.Error())
	case errors.Is(err, errTooManyRules):
		api.WriteError(w, http.StatusUnprocessableEntity, err.Error())
	case err != nil:
		api.WriteError(w, http.StatusInternalServerError, err.Error())
	default:
		u.log.Info("trigger added", "trigger", t.Text, "name", t.Name)
		api.WriteJSON(w, http.StatusCreated, t)
	}
}

func (u *Unit) deleteTrigger(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	switch err := u.DeleteTrigger(name); {
	case errors.Is(err, errNoTrigger):
		api.WriteError(w, http.StatusNotFound, err.Error())
	case err != nil:
		api.WriteError(w, http.StatusInternalServerError, err.Error())
	default:
		u.log.Info("trigger deleted", "name", name)
		api.WriteJSON(w, http.StatusOK, TriggerList{Triggers: u.Triggers()})
	}
}
