package api

import (
	"net/http"
)

// handleListPolicies serves GET /api/v1/policies: the automatic replay
// policies the token may see, with their state.
func (s *Server) handleListPolicies(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Ops.Policies(r.Context(), caller(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}

// handleGetPolicy serves GET /api/v1/policies/{name}.
func (s *Server) handleGetPolicy(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Ops.Policy(r.Context(), caller(r), r.PathValue("name"))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}

// handlePausePolicy serves POST /api/v1/policies/{name}/pause?reason=….
func (s *Server) handlePausePolicy(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Ops.PausePolicy(r.Context(), caller(r), r.PathValue("name"), queryOf(r).str("reason"))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}

// handleResumePolicy serves POST /api/v1/policies/{name}/resume.
func (s *Server) handleResumePolicy(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Ops.ResumePolicy(r.Context(), caller(r), r.PathValue("name"))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}
