package api

import (
	"net/http"

	"github.com/dlq/dlq/store"
)

// handleListGroups serves GET /api/v1/groups: failure groups, largest
// first.
func (s *Server) handleListGroups(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	q := queryOf(r)
	gq := store.GroupQuery{SourceQueue: q.str("source_queue"), Status: q.str("status"), Scope: p.Queues}
	var err error
	if gq.Limit, err = q.int("limit", 50, 1, 1000); err != nil {
		s.writeErr(w, r, err)
		return
	}
	if gq.SourceQueue != "" && !p.SeesQueue(gq.SourceQueue) {
		s.writeErr(w, r, &forbiddenError{msg: "source_queue: token " + p.Name + " may not see queue " + gq.SourceQueue})
		return
	}
	groups, err := s.cfg.Store.Groups(r.Context(), gq)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"groups": groups})
}

// handleGetGroup serves GET /api/v1/groups/{id}.
func (s *Server) handleGetGroup(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := store.ParseGroupID(id); err != nil {
		s.writeErr(w, r, badParam("id", "%q must be a group id (16 hex digits)", id))
		return
	}
	g, err := s.cfg.Store.GetGroup(r.Context(), id, PrincipalFrom(r.Context()).Queues)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, g)
}
