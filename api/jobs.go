package api

import "net/http"

// handleJobs serves GET /api/v1/jobs: every cron job with its schedule,
// the instance holding its lease (and the fencing token), when it last
// succeeded on any instance, and its recent runs (tick, instance, start,
// end, outcome, rows affected, error).
func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Ops.Jobs(r.Context(), caller(r))
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}
