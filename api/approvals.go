package api

import (
	"net/http"
)

// handleListApprovals serves GET /api/v1/approvals.
func (s *Server) handleListApprovals(w http.ResponseWriter, r *http.Request) {
	limit, err := queryOf(r).int("limit", 50, 1, 1000)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	list, err := s.cfg.Ops.ListApprovals(r.Context(), caller(r), limit)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"approvals": list})
}

// handleGetApproval serves GET /api/v1/approvals/{id}.
func (s *Server) handleGetApproval(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	a, err := s.cfg.Ops.GetApproval(r.Context(), caller(r), id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, a)
}

// handleApprove serves POST /api/v1/approvals/{id}/approve: the request
// runs on its snapshot.
func (s *Server) handleApprove(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	a, err := s.cfg.Ops.Approve(r.Context(), caller(r), id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, a)
}

// handleReject serves POST /api/v1/approvals/{id}/reject?reason=….
func (s *Server) handleReject(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	a, err := s.cfg.Ops.Reject(r.Context(), caller(r), id, queryOf(r).str("reason"))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, a)
}

// handleWithdraw serves POST /api/v1/approvals/{id}/withdraw: its
// requester takes a pending request back; nothing runs.
func (s *Server) handleWithdraw(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	a, err := s.cfg.Ops.Withdraw(r.Context(), caller(r), id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, a)
}
