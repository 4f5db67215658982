package api

import (
	"net/http"

	"github.com/dlq/dlq/store"
)

// handleListGroups serves GET /api/v1/groups: failure groups, largest
// first.
func (s *Server) handleListGroups(w http.ResponseWriter, r *http.Request) {
	q := queryOf(r)
	gq := store.GroupQuery{SourceQueue: q.str("source_queue"), Status: q.str("status"), Category: q.str("category")}
	var err error
	if gq.Limit, err = q.int("limit", 50, 1, 1000); err != nil {
		s.writeErr(w, r, err)
		return
	}
	groups, err := s.cfg.Ops.Groups(r.Context(), caller(r), gq)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"groups": groups})
}

// handleGetGroup serves GET /api/v1/groups/{id}.
func (s *Server) handleGetGroup(w http.ResponseWriter, r *http.Request) {
	g, err := s.cfg.Ops.Group(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, g)
}
