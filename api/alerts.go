package api

import (
	"maps"
	"net/http"

	"github.com/dlq/dlq/alerts"
)

// handleAlerts serves GET /api/v1/alerts: the rules (with per-queue
// overrides), every alert that is pending, firing or just resolved with
// the time it entered that state, and when alerts were last evaluated. A
// token scoped to some source queues sees only their alerts and overrides,
// plus the store-wide ones (capacity).
func (s *Server) handleAlerts(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Cron == nil {
		writeError(w, r, http.StatusServiceUnavailable, "unavailable", "alerts are not available on this instance")
		return
	}
	v, err := s.cfg.Cron.Alerts(r.Context())
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	p := PrincipalFrom(r.Context())
	if p.Queues != nil {
		visible := make([]alerts.AlertView, 0, len(v.Alerts))
		for _, a := range v.Alerts {
			if a.SourceQueue == "" || p.SeesQueue(a.SourceQueue) {
				visible = append(visible, a)
			}
		}
		v.Alerts = visible
		for i := range v.Rules {
			if v.Rules[i].Overrides == nil {
				continue
			}
			o := maps.Clone(v.Rules[i].Overrides)
			maps.DeleteFunc(o, func(q string, _ alerts.RuleOverrideView) bool { return !p.SeesQueue(q) })
			v.Rules[i].Overrides = o
		}
	}
	if v.Alerts == nil {
		v.Alerts = []alerts.AlertView{}
	}
	writeJSON(w, r, http.StatusOK, v)
}
