package api

import (
	"context"
	"net/http"
	"time"
)

// Check is one readiness check: nil when the dependency is usable.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
	// Detail, when set, adds a line to a passing check's result that an
	// operator should know but that does not make dlq unready (the
	// database's replication is asynchronous). "" adds nothing. Optional.
	Detail func(ctx context.Context) string
}

type checkResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// handleHealthz answers as long as the process serves HTTP.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// handleMetrics serves the Prometheus metrics.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) { s.metrics.ServeHTTP(w, r) }

// handleReadyz runs every readiness check; any failure makes it 503 and
// says which dependency failed and why.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	status := http.StatusOK
	results := make([]checkResult, 0, len(s.cfg.Checks))
	for _, c := range s.cfg.Checks {
		res := checkResult{Name: c.Name, OK: true}
		if err := c.Check(ctx); err != nil {
			res.OK, res.Error = false, err.Error()
			status = http.StatusServiceUnavailable
		} else if c.Detail != nil {
			res.Detail = c.Detail(ctx)
		}
		results = append(results, res)
	}
	body := map[string]any{"status": "ready", "checks": results}
	if status != http.StatusOK {
		body["status"] = "not ready"
	}
	writeJSON(w, r, status, body)
}
