package api

import (
	"net/http"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// handleAudit serves GET /api/v1/audit: who did what, newest first.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := queryOf(r)
	req := ops.AuditRequest{Actor: q.str("actor"), Action: q.str("action"), Cursor: q.str("cursor")}
	var err error
	if req.Limit, err = q.int("limit", store.ListLimitDefault, 1, store.ListLimitMax); err != nil {
		s.writeErr(w, r, err)
		return
	}
	if req.Since, err = q.time("since"); err != nil {
		s.writeErr(w, r, err)
		return
	}
	page, err := s.cfg.Ops.Audit(r.Context(), caller(r), req)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, page)
}
