package api

import (
	"net/http"

	"github.com/dlq/dlq/ops"
)

// handleStartReplay serves POST /api/v1/replays: 202 with the task, or 200
// with a dry run's answer.
func (s *Server) handleStartReplay(w http.ResponseWriter, r *http.Request) {
	var body ops.ReplayRequest
	if err := decodeBody(r, &body); err != nil {
		s.writeErr(w, r, err)
		return
	}
	task, err := s.cfg.Ops.StartReplay(r.Context(), caller(r), body)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	status := http.StatusAccepted
	if task.DryRun {
		status = http.StatusOK
	}
	writeJSON(w, r, status, task)
}

// handleListReplays serves GET /api/v1/replays: recent tasks the caller
// may see, newest first.
func (s *Server) handleListReplays(w http.ResponseWriter, r *http.Request) {
	limit, err := queryOf(r).int("limit", 50, 1, 1000)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	tasks, err := s.cfg.Ops.ListReplays(r.Context(), caller(r), limit)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"replays": tasks})
}

// handleGetReplay serves GET /api/v1/replays/{id}.
func (s *Server) handleGetReplay(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	task, err := s.cfg.Ops.ReplayStatus(r.Context(), caller(r), id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, task)
}

// handleCancelReplay serves POST /api/v1/replays/{id}/cancel.
func (s *Server) handleCancelReplay(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	task, err := s.cfg.Ops.CancelReplay(r.Context(), caller(r), id)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, task)
}
