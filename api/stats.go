package api

import "net/http"

// handleStats serves GET /api/v1/stats.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.cfg.Ops.Stats(r.Context(), caller(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, st)
}

// handleStatus serves GET /api/v1/status: per source queue counts from the
// summary table.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Ops.Status(r.Context(), caller(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}
