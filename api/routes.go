package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
)

// route is one entry of the route table.
type route struct {
	method, path string
	// action is the operation the route performs; its permission (the
	// least role) comes from ops' table. "" is a public route.
	action ops.Action
	// query lists the query parameters the route takes; any other is a
	// 400 naming it, so a typo (staus=) never silently widens a listing.
	query []string
	// body says whether the route takes a JSON body. One sent to a route
	// that takes none must be empty or {}: a field there is an unknown
	// field (400 naming it), like anywhere else.
	body bool
	// handler serves the route once guard has let the request through.
	handler func(*Server, http.ResponseWriter, *http.Request)
}

func (rt route) pattern() string { return rt.method + " " + rt.path }

// role is the least role that may call the route; "" for a public route.
func (rt route) role() string {
	if rt.action == "" {
		return ""
	}
	return ops.RoleFor(rt.action)
}

// Query parameter lists shared by several routes.
var (
	// filterParams are the listing filters taken from the URL.
	filterParams = []string{"status", "source_queue", "reason", "failed_after", "failed_before", "q", "group", "field", "category",
		"replay_task", "replay_outcome", "replay_error", "approval"}
	messageParams = append([]string{"limit", "cursor", "include_body", "total"}, filterParams...)
	exportParams  = append([]string{"cursor"}, filterParams...)
)

// routeTable is every route dlq serves, one line each: the operation it
// performs (whose least role, ops.RoleFor, is the permission matrix of
// docs/API.md), the accepted query parameters, and what the tests hold
// api/openapi.yaml and the auth matrix to: a route added here without both
// fails the tests.
var routeTable = []route{
	{"GET", "/api/v1/messages", ops.ActListMessages, messageParams, false, (*Server).handleListMessages},
	{"GET", "/api/v1/messages/export", ops.ActExport, exportParams, false, (*Server).handleExport},
	{"POST", "/api/v1/messages/import", ops.ActImport, nil, true, (*Server).handleImport},
	{"GET", "/api/v1/messages/{id}", ops.ActGetMessage, nil, false, (*Server).handleGetMessage},
	{"DELETE", "/api/v1/messages/{id}", ops.ActDelete, nil, false, (*Server).handleDeleteMessage},
	{"POST", "/api/v1/messages/{id}/edit-replay", ops.ActEditReplay, nil, true, (*Server).handleEditReplay},
	{"POST", "/api/v1/messages/acknowledge", ops.ActAcknowledge, nil, true, (*Server).handleAcknowledge},
	{"POST", "/api/v1/messages/delete", ops.ActDelete, nil, true, (*Server).handleDelete},
	{"POST", "/api/v1/replays", ops.ActStartReplay, nil, true, (*Server).handleStartReplay},
	{"GET", "/api/v1/replays", ops.ActListReplays, []string{"limit"}, false, (*Server).handleListReplays},
	{"GET", "/api/v1/replays/{id}", ops.ActGetReplay, nil, false, (*Server).handleGetReplay},
	{"POST", "/api/v1/replays/{id}/cancel", ops.ActCancelReplay, nil, false, (*Server).handleCancelReplay},
	{"GET", "/api/v1/approvals", ops.ActListApprovals, []string{"limit"}, false, (*Server).handleListApprovals},
	{"GET", "/api/v1/approvals/{id}", ops.ActListApprovals, nil, false, (*Server).handleGetApproval},
	{"POST", "/api/v1/approvals/{id}/approve", ops.ActDecideApproval, nil, false, (*Server).handleApprove},
	{"POST", "/api/v1/approvals/{id}/reject", ops.ActDecideApproval, []string{"reason"}, false, (*Server).handleReject},
	{"POST", "/api/v1/approvals/{id}/withdraw", ops.ActWithdrawApproval, nil, false, (*Server).handleWithdraw},
	{"GET", "/api/v1/policies", ops.ActListPolicies, nil, false, (*Server).handleListPolicies},
	{"GET", "/api/v1/policies/{name}", ops.ActListPolicies, nil, false, (*Server).handleGetPolicy},
	{"POST", "/api/v1/policies/{name}/pause", ops.ActPausePolicy, []string{"reason"}, false, (*Server).handlePausePolicy},
	{"POST", "/api/v1/policies/{name}/resume", ops.ActPausePolicy, nil, false, (*Server).handleResumePolicy},
	{"GET", "/api/v1/groups", ops.ActGroups, []string{"source_queue", "status", "category", "limit"}, false, (*Server).handleListGroups},
	{"GET", "/api/v1/groups/{id}", ops.ActGroups, nil, false, (*Server).handleGetGroup},
	{"GET", "/api/v1/stats", ops.ActStats, nil, false, (*Server).handleStats},
	{"GET", "/api/v1/status", ops.ActStatus, nil, false, (*Server).handleStatus},
	{"GET", "/api/v1/audit", ops.ActAudit, []string{"limit", "cursor", "actor", "action", "since"}, false, (*Server).handleAudit},
	{"GET", "/api/v1/jobs", ops.ActJobs, nil, false, (*Server).handleJobs},
	{"GET", "/api/v1/alerts", ops.ActAlerts, nil, false, (*Server).handleAlerts},
	{"GET", "/api/v1/openapi.yaml", "", nil, false, (*Server).handleOpenAPI},
	{"GET", "/healthz", "", nil, false, (*Server).handleHealthz},
	{"GET", "/readyz", "", nil, false, (*Server).handleReadyz},
	{"GET", "/metrics", "", nil, false, (*Server).handleMetrics},
}

// Route describes one route of the table.
type Route struct {
	Method, Path string
	// Role is the least role that may call it; "" for a public route.
	Role string
	// Query lists the query parameters it takes.
	Query []string
	// Body says whether it takes a JSON body.
	Body bool
}

// Pattern is the route's ServeMux pattern, "GET /api/v1/messages".
func (r Route) Pattern() string { return r.Method + " " + r.Path }

// Routes returns the route table, for tests and tools that must follow it.
func Routes() []Route {
	out := make([]Route, len(routeTable))
	for i, rt := range routeTable {
		out[i] = Route{Method: rt.method, Path: rt.path, Role: rt.role(), Query: slices.Clone(rt.query), Body: rt.body}
	}
	return out
}

// needsOps reports whether rt needs the operations layer (the /api/v1
// routes but the OpenAPI document).
func (rt route) needsOps() bool {
	return strings.HasPrefix(rt.path, "/api/v1/") && rt.path != "/api/v1/openapi.yaml"
}

const (
	principalKey ctxKey = iota + 100
	queryKey
)

// PrincipalFrom returns the authenticated caller of a request served by a
// route with a role.
func PrincipalFrom(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey).(auth.Principal)
	return p
}

// queryOf returns the query parameters guard checked against the route.
func queryOf(r *http.Request) query {
	q, _ := r.Context().Value(queryKey).(query)
	return q
}

// guard wraps a route's handler: throttle failed authentications per
// client (429), authenticate (401), rate limit per token (429), check the
// role (403, ops.Authorize), bound the body (413), check the query parameters and refuse
// a body where none is taken (400), then serve. Authentication comes
// first so that an unauthenticated caller learns nothing about the route.
func (s *Server) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if rt.action != "" && s.cfg.Auth.Open() {
			if msg := openBrowserRefusal(r); msg != "" {
				writeError(w, r, http.StatusForbidden, "forbidden", msg)
				return
			}
		}
		if rt.action != "" {
			p, err := s.cfg.Auth.AuthenticateFrom(clientAddr(r), bearer(r))
			var te *auth.ThrottledError
			switch {
			case errors.As(err, &te):
				w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(te.RetryAfter)))
				writeError(w, r, http.StatusTooManyRequests, "rate_limited",
					fmt.Sprintf("too many failed authentications from %s; retry in %s", te.Client, te.RetryAfter.Round(time.Second)))
				return
			case err != nil:
				w.Header().Set("WWW-Authenticate", `Bearer realm="dlq"`)
				code := "invalid_token"
				if errors.Is(err, auth.ErrNoToken) {
					code = "missing_token"
				}
				writeError(w, r, http.StatusUnauthorized, code, err.Error()+": send Authorization: Bearer <token>")
				return
			}
			if !s.cfg.Auth.Allow(p) {
				w.Header().Set("Retry-After", "1")
				writeError(w, r, http.StatusTooManyRequests, "rate_limited", "too many requests for token "+p.Name+"; slow down")
				return
			}
			// The same table the operations layer applies: refused here,
			// before the request is read, so the caller learns nothing more.
			if err := ops.Authorize(p, rt.action); err != nil {
				writeError(w, r, http.StatusForbidden, "forbidden", err.Error())
				return
			}
			ctx = context.WithValue(ctx, principalKey, p)
		}
		if r.Body != nil {
			limit := s.cfg.MaxBodyBytes
			if rt.action == ops.ActImport {
				limit = s.cfg.ImportMaxBodyBytes
			}
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		q, err := newQuery(r, rt.query...)
		if err == nil && !rt.body {
			err = refuseBody(r)
		}
		if err != nil {
			s.writeErr(w, r, err)
			return
		}
		ctx = context.WithValue(ctx, queryKey, q)
		rt.handler(s, w, r.WithContext(ctx))
	})
}

// retryAfterSeconds renders a wait as Retry-After: whole seconds, at
// least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// withErrorEnvelope turns ServeMux's own plain-text 404 and 405 answers
// into the error envelope, so every error has one shape.
func (s *Server) withErrorEnvelope(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// Let the mux decide between 404 and 405 (and set Allow), then
		// replace its body.
		c := &captureWriter{header: http.Header{}}
		h.ServeHTTP(c, r)
		if allow := c.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		switch c.status {
		case http.StatusMethodNotAllowed:
			writeError(w, r, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path)
		case http.StatusNotFound, 0:
			writeError(w, r, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path)
		default:
			// A redirect (trailing slash, cleaned path): pass it on.
			for k, v := range c.header {
				w.Header()[k] = v
			}
			w.WriteHeader(c.status)
		}
	})
}

// captureWriter records what the mux's fallback handler would answer.
type captureWriter struct {
	header http.Header
	status int
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return len(b), nil
}
func (c *captureWriter) WriteHeader(code int) { c.status = code }
