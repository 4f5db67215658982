package api

import "net/http"

// handleAlerts serves GET /api/v1/alerts: the rules (with per-queue
// overrides), every alert that is pending, firing or just resolved with
// the time it entered that state, and when alerts were last evaluated. A
// token scoped to some source queues sees only their alerts and overrides,
// plus the store-wide ones (capacity).
func (s *Server) handleAlerts(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Ops.Alerts(r.Context(), caller(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}
