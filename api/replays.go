package api

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// replayBody is the body of POST /api/v1/replays: the replay service's
// request, plus confirm, which the API checks as it does for acknowledge
// and delete.
type replayBody struct {
	replay.Request
	// Confirm lets a replay by filter select more than ConfirmAbove
	// messages.
	Confirm bool `json:"confirm"`
}

// handleStartReplay serves POST /api/v1/replays.
func (s *Server) handleStartReplay(w http.ResponseWriter, r *http.Request) {
	if !s.replaysAvailable(w, r) {
		return
	}
	p := PrincipalFrom(r.Context())
	var body replayBody
	if err := decodeBody(r, &body); err != nil {
		s.writeErr(w, r, err)
		return
	}
	req := body.Request
	if _, err := selection(req.IDs, req.Filter); err != nil {
		s.writeErr(w, r, err)
		return
	}
	if req.Limit < 0 {
		s.writeErr(w, r, badParam("limit", "%d must be >= 0", req.Limit))
		return
	}
	if p.Queues != nil {
		// The service restricts the selection to the scope in SQL too.
		req.Scope = p.Queues
		if req.Filter != nil {
			sf, err := scoped(p, *req.Filter)
			if err != nil {
				s.writeErr(w, r, err)
				return
			}
			req.Filter = &sf
		}
		if len(req.IDs) > 0 {
			// Ids outside the scope are answered as missing, exactly like
			// GET /messages/{id} does.
			found, err := s.cfg.Store.MessagesExist(r.Context(), req.IDs, p.Queues)
			if err != nil {
				s.writeErr(w, r, err)
				return
			}
			var missing []int64
			for _, id := range req.IDs {
				if !found[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				s.writeErr(w, r, fmt.Errorf("messages %v: %w", missing, store.ErrNotFound))
				return
			}
		}
	}
	if req.Filter != nil && !req.DryRun && !body.Confirm && s.cfg.ConfirmAbove > 0 {
		// Count first, with the service's own dry run. Messages arriving
		// between the count and the start can push a task past the
		// threshold; the count is a safeguard against a mistaken filter,
		// not a hard cap (limit is).
		dry := req
		dry.DryRun = true
		t, err := s.cfg.Replayer.Start(r.Context(), dry, actor(r))
		if err != nil {
			s.writeErr(w, r, err)
			return
		}
		if t.Error == "" && t.Remaining > s.cfg.ConfirmAbove {
			s.writeErr(w, r, &store.ConfirmError{Matched: t.Remaining, Threshold: s.cfg.ConfirmAbove})
			return
		}
	}
	task, err := s.cfg.Replayer.Start(r.Context(), req, actor(r))
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

// handleListReplays serves GET /api/v1/replays: recent tasks, newest first.
func (s *Server) handleListReplays(w http.ResponseWriter, r *http.Request) {
	if !s.replaysAvailable(w, r) {
		return
	}
	limit, err := queryOf(r).int("limit", 50, 1, 1000)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	tasks, err := s.cfg.Replayer.List(r.Context(), limit)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	p := PrincipalFrom(r.Context())
	out := make([]replay.Task, 0, len(tasks))
	for _, t := range tasks {
		if taskVisible(p, t) {
			out = append(out, t)
		}
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"replays": out})
}

// handleGetReplay serves GET /api/v1/replays/{id}.
func (s *Server) handleGetReplay(w http.ResponseWriter, r *http.Request) {
	if !s.replaysAvailable(w, r) {
		return
	}
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	task, err := s.cfg.Replayer.Get(r.Context(), id)
	if err == nil && !taskVisible(PrincipalFrom(r.Context()), task) {
		err = fmt.Errorf("replay %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, task)
}

// handleCancelReplay serves POST /api/v1/replays/{id}/cancel.
func (s *Server) handleCancelReplay(w http.ResponseWriter, r *http.Request) {
	if !s.replaysAvailable(w, r) {
		return
	}
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	task, err := s.cfg.Replayer.Get(r.Context(), id)
	if err == nil && !taskVisible(PrincipalFrom(r.Context()), task) {
		err = fmt.Errorf("replay %d: %w", id, store.ErrNotFound)
	}
	if err == nil {
		task, err = s.cfg.Replayer.Cancel(r.Context(), id, actor(r))
	}
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, task)
}

// taskVisible reports whether a caller may see a task. A scoped caller
// sees its own tasks and those whose filter stays within its queues; a task
// by ids started by someone else may touch any queue, so it is hidden.
func taskVisible(p auth.Principal, t replay.Task) bool {
	if p.Queues == nil || t.CreatedBy == p.Name {
		return true
	}
	f := t.Request.Filter
	if f == nil || len(t.Request.IDs) > 0 {
		return false
	}
	if f.SourceQueue != "" {
		return slices.Contains(p.Queues, f.SourceQueue)
	}
	if f.Scope == nil {
		return false
	}
	for _, q := range f.Scope {
		if !slices.Contains(p.Queues, q) {
			return false
		}
	}
	return true
}

func (s *Server) replaysAvailable(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Replayer == nil {
		writeError(w, r, http.StatusServiceUnavailable, "unavailable", "replays are not available on this instance")
		return false
	}
	return true
}
