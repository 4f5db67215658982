package api

import (
	"net/http"
	"time"

	"github.com/dlq/dlq/store"
)

// handleStats serves GET /api/v1/stats.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.cfg.Store.Stats(r.Context(), PrincipalFrom(r.Context()).Queues)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, st)
}

type statusResponse struct {
	At     time.Time          `json:"at"`
	Queues []store.QueueStats `json:"queues"`
}

// handleStatus serves GET /api/v1/status: per source queue counts from the
// summary table.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	at, queues, err := s.cfg.Store.QueueSummary(r.Context(), PrincipalFrom(r.Context()).Queues)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, statusResponse{At: at, Queues: queues})
}
