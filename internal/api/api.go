// Package api is the running agent's control API: HTTP with JSON bodies
// under /api/v1, served by `loupe run` on a unix socket (and, when
// configured, on a TCP address with a bearer token), and the client the
// CLI uses to reach it. docs/api.md is the reference.
//
// # Routes
//
// A Route is a method, a path under Prefix, an access class and a
// handler. The agent serves the agent-wide routes (GET /api/v1/status) and
// those of every capability unit that provides some (capability.RouteProvider,
// an optional interface, so a unit without routes has nothing to declare).
// The Route type lives here, in a package that imports no other Loupe
// package but config/check: capability imports api for RouteProvider,
// and api stays ignorant of capabilities. The status document is therefore
// defined here too (Status), as the wire contract; the agent fills it from
// its units' capability.Status, so that a change to an internal type does
// not silently change what clients read.
//
// # Access
//
// Every route declares its class: Read (status, counters), Payload (what
// carries packet contents or addresses of traffic, such as a capture
// stream) or Write (what changes the agent's state, such as a trigger).
// On the unix socket the socket file's permissions decide who may
// connect (0600, the agent's user); Payload and Write routes further
// require the peer, by its kernel-given credentials (SO_PEERCRED), to be
// root or the agent's user, so that a socket an operator opened to a
// group for reading does not also hand out packets or control. On TCP,
// every class requires the bearer token.
//
// # Versioning
//
// /api/v1 only grows: new routes, new fields. Removing or changing the
// meaning of a field or route takes /api/v2, served beside v1 for a while.
package api

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Prefix is the path every version 1 route starts with.
const Prefix = "/api/v1/"

// Access is a route's access class. The zero value is invalid, so that a
// route cannot be registered without saying what it gives access to.
type Access int

const (
	// Read routes describe the agent: status, counters, configuration
	// without secrets.
	Read Access = iota + 1
	// Payload routes return what the traffic carried (packet bytes) or
	// who talked to whom in detail: capture streams, live records.
	Payload
	// Write routes change the agent's state: triggers, filters, reloads.
	Write
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Payload:
		return "payload"
	case Write:
		return "write"
	}
	return fmt.Sprintf("access(%d)", int(a))
}

// Route is one endpoint of the API.
type Route struct {
	// Method is the HTTP method: GET, POST, PUT, DELETE. A GET route
	// also answers HEAD.
	Method string
	// Path starts with Prefix and may hold net/http wildcards
	// (/api/v1/capture/{id}), which the handler reads with
	// r.PathValue.
	Path   string
	Access Access
	// Stream marks a long-lived response (a pcapng stream, a follow):
	// it gets no write deadline, and its request context is cancelled
	// when the client goes away or the agent stops, which is the
	// handler's signal to return. Flush with
	// http.NewResponseController(w).Flush() (or w.(http.Flusher)).
	// Other routes must answer within RequestTimeout.
	Stream  bool
	Handler http.Handler
}

// Error is the body of every error response: {"error": "..."}.
type Error struct {
	Error string `json:"error"`
}

// WriteJSON writes v as the JSON body of a response with status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// The client may be gone; there is no one left to tell.
	_ = enc.Encode(v)
}

// WriteError writes {"error": msg} with status code.
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteJSON(w, code, Error{Error: msg})
}
