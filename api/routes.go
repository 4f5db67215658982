package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/dlq/dlq/auth"
)

// route is one entry of the API: a ServeMux pattern, the least role that
// may call it ("" for a public route), and its handler.
type route struct {
	pattern string
	role    string
	handler http.HandlerFunc
}

// routes is the API's route table. Every /api/v1 route is listed here, one
// line each, so the table is also the permission matrix (docs/API.md and
// the auth matrix test follow it).
func (s *Server) routes() []route {
	return []route{
		{"GET /api/v1/messages", auth.RoleViewer, s.handleListMessages},
		{"GET /api/v1/messages/{id}", auth.RoleViewer, s.handleGetMessage},
		{"DELETE /api/v1/messages/{id}", auth.RoleAdmin, s.handleDeleteMessage},
		{"POST /api/v1/messages/acknowledge", auth.RoleOperator, s.handleAcknowledge},
		{"POST /api/v1/messages/delete", auth.RoleAdmin, s.handleDelete},
		{"POST /api/v1/replays", auth.RoleOperator, s.handleStartReplay},
		{"GET /api/v1/replays", auth.RoleViewer, s.handleListReplays},
		{"GET /api/v1/replays/{id}", auth.RoleViewer, s.handleGetReplay},
		{"POST /api/v1/replays/{id}/cancel", auth.RoleOperator, s.handleCancelReplay},
		{"GET /api/v1/groups", auth.RoleViewer, s.handleListGroups},
		{"GET /api/v1/groups/{id}", auth.RoleViewer, s.handleGetGroup},
		{"GET /api/v1/stats", auth.RoleViewer, s.handleStats},
		{"GET /api/v1/status", auth.RoleViewer, s.handleStatus},
		{"GET /api/v1/audit", auth.RoleAdmin, s.handleAudit},
		{"GET /api/v1/jobs", auth.RoleViewer, s.handleJobs},
		{"GET /api/v1/alerts", auth.RoleViewer, s.handleAlerts},
		{"GET /api/v1/openapi.yaml", "", s.handleOpenAPI},
	}
}

const principalKey ctxKey = iota + 100

// PrincipalFrom returns the authenticated caller of a request served by a
// route with a role.
func PrincipalFrom(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey).(auth.Principal)
	return p
}

// guard wraps a route's handler: authenticate (401), rate limit (429),
// check the role (403), bound the body (413), then serve.
func (s *Server) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.role == "" {
			rt.handler(w, r)
			return
		}
		p, err := s.cfg.Auth.Authenticate(bearer(r))
		if err != nil {
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
		if !p.Can(rt.role) {
			writeError(w, r, http.StatusForbidden, "forbidden", "token "+p.Name+" has role "+p.Role+"; this needs "+rt.role)
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		}
		rt.handler(w, r.WithContext(context.WithValue(r.Context(), principalKey, p)))
	})
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
