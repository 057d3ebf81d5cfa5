package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"loupe/internal/api"
	"loupe/internal/pcapng"
)

// The capture's control API paths (docs/api.md).
const (
	TriggersPath = api.Prefix + "triggers"
	FollowPath   = api.Prefix + "capture/follow"
	CapturesPath = api.Prefix + "captures"
)

// CaptureList is the body of GET /api/v1/captures: the triggered
// connections the agent remembers, newest first, and the capture files
// of capture.dir, oldest first (none without a directory).
type CaptureList struct {
	Traces []Trace           `json:"traces"`
	Files  []pcapng.FileInfo `json:"files"`
	Dir    string            `json:"dir,omitempty"`
}

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
		{Method: http.MethodGet, Path: CapturesPath, Access: api.Read, Handler: http.HandlerFunc(u.listCaptures)},
		{Method: http.MethodGet, Path: CapturesPath + "/files/{name}", Access: api.Payload, Stream: true, Handler: http.HandlerFunc(u.serveFile)},
	}
}

func (u *Unit) listCaptures(w http.ResponseWriter, _ *http.Request) {
	out := CaptureList{Traces: u.recent.list(), Files: []pcapng.FileInfo{}}
	if u.files != nil {
		files, err := u.files.Files()
		if err != nil {
			api.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		out.Files, out.Dir = files, u.files.Dir()
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// serveFile sends one capture file of capture.dir: a stream, since a file
// may be large and the client slow.
func (u *Unit) serveFile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if u.files == nil {
		api.WriteError(w, http.StatusNotFound, "no capture directory (capture.dir)")
		return
	}
	f, err := u.files.OpenFile(name)
	if errors.Is(err, os.ErrNotExist) {
		api.WriteError(w, http.StatusNotFound, fmt.Sprintf("no capture file %q", name))
		return
	}
	if err != nil {
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, err := io.Copy(w, f); err != nil {
		u.log.Debug("sending a capture file", "name", name, "err", err)
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
