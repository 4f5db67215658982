package api

import (
	"context"
	"net/http"

	"github.com/dlq/dlq/cron"
)

// CronViews is what the cron feature shows over HTTP; *cron.Service
// implements it.
type CronViews interface {
	Jobs(ctx context.Context) (cron.JobsView, error)
	Alerts(ctx context.Context) (cron.AlertsView, error)
}

// handleJobs serves GET /api/v1/jobs: every cron job with its schedule,
// the instance holding its lease (and the fencing token), when it last
// succeeded on any instance, and its recent runs (tick, instance, start,
// end, outcome, rows affected, error).
func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Cron == nil {
		writeError(w, r, http.StatusServiceUnavailable, "unavailable", "cron jobs are not available on this instance")
		return
	}
	v, err := s.cfg.Cron.Jobs(r.Context())
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, v)
}
