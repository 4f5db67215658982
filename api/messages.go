package api

import (
	"net/http"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// handleListMessages serves GET /api/v1/messages.
func (s *Server) handleListMessages(w http.ResponseWriter, r *http.Request) {
	q := queryOf(r)
	f, err := q.filter()
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	req := ops.ListRequest{Filter: f, Cursor: q.str("cursor")}
	if req.Limit, err = q.int("limit", store.ListLimitDefault, 1, store.ListLimitMax); err != nil {
		s.writeErr(w, r, err)
		return
	}
	if req.IncludeBody, err = q.bool("include_body"); err != nil {
		s.writeErr(w, r, err)
		return
	}
	if req.Total, err = q.bool("total"); err != nil {
		s.writeErr(w, r, err)
		return
	}
	page, err := s.cfg.Ops.ListMessages(r.Context(), caller(r), req)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, page)
}

// handleGetMessage serves GET /api/v1/messages/{id}: one message, with its
// body when the caller may see bodies.
func (s *Server) handleGetMessage(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	m, err := s.cfg.Ops.GetMessage(r.Context(), caller(r), id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, m)
}

// handleDeleteMessage serves DELETE /api/v1/messages/{id}.
func (s *Server) handleDeleteMessage(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	res, err := s.cfg.Ops.DeleteMessage(r.Context(), caller(r), id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, res)
}

// caller is who a request acts as, for the operations layer and the audit
// rows it writes.
func caller(r *http.Request) ops.Caller {
	return ops.Caller{Principal: PrincipalFrom(r.Context()), Via: ops.ViaAPI, RequestID: RequestID(r.Context())}
}

// handleEditReplay serves POST /api/v1/messages/{id}/edit-replay: 202
// with the task that publishes the corrected copy, or 200 with a dry
// run's copy.
func (s *Server) handleEditReplay(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	var body ops.EditRequest
	if err := decodeBody(r, &body); err != nil {
		s.writeErr(w, r, err)
		return
	}
	res, err := s.cfg.Ops.EditReplay(r.Context(), caller(r), id, body)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	status := http.StatusAccepted
	if res.DryRun {
		status = http.StatusOK
	}
	writeJSON(w, r, status, res)
}
