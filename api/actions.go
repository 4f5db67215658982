package api

import (
	"context"
	"net/http"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// handleAcknowledge serves POST /api/v1/messages/acknowledge.
func (s *Server) handleAcknowledge(w http.ResponseWriter, r *http.Request) {
	s.bulk(w, r, s.cfg.Ops.Acknowledge)
}

// handleDelete serves POST /api/v1/messages/delete.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	s.bulk(w, r, s.cfg.Ops.Delete)
}

type bulkFunc func(ctx context.Context, c ops.Caller, req ops.ActionRequest) (store.ActionResult, error)

func (s *Server) bulk(w http.ResponseWriter, r *http.Request, do bulkFunc) {
	var req ops.ActionRequest
	if err := decodeBody(r, &req); err != nil {
		s.writeErr(w, r, err)
		return
	}
	res, err := do(r.Context(), caller(r), req)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, res)
}
