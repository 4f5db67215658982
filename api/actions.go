package api

import (
	"context"
	"net/http"

	"github.com/dlq/dlq/store"
)

// actionRequest is the body of POST /api/v1/messages/acknowledge and
// /delete: ids, or a filter (which may name a group), with a dry run and a
// confirmation for large selections.
type actionRequest struct {
	IDs     []int64       `json:"ids"`
	Filter  *store.Filter `json:"filter"`
	Limit   int           `json:"limit"`
	DryRun  bool          `json:"dry_run"`
	Confirm bool          `json:"confirm"`
}

func (s *Server) handleAcknowledge(w http.ResponseWriter, r *http.Request) {
	s.bulk(w, r, s.cfg.Store.Acknowledge)
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	s.bulk(w, r, s.cfg.Store.Delete)
}

type actionFunc func(ctx context.Context, f store.Filter, a store.Actor, o store.ActionOptions) (store.ActionResult, error)

func (s *Server) bulk(w http.ResponseWriter, r *http.Request, do actionFunc) {
	p := PrincipalFrom(r.Context())
	var req actionRequest
	if err := decodeBody(r, &req); err != nil {
		s.writeErr(w, r, err)
		return
	}
	f, err := selection(req.IDs, req.Filter)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if req.Limit < 0 {
		s.writeErr(w, r, badParam("limit", "%d must be >= 0", req.Limit))
		return
	}
	if f, err = scoped(p, f); err != nil {
		s.writeErr(w, r, err)
		return
	}
	res, err := do(r.Context(), f, actor(r), store.ActionOptions{
		DryRun: req.DryRun, Confirm: req.Confirm, ConfirmAbove: s.cfg.ConfirmAbove, Limit: req.Limit,
	})
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, res)
}

// selection turns a body's ids or filter into one filter.
func selection(ids []int64, filter *store.Filter) (store.Filter, error) {
	switch {
	case len(ids) > 0 && filter != nil:
		return store.Filter{}, badParam("ids", "give ids or filter, not both")
	case len(ids) > 0:
		f := store.Filter{IDs: ids}
		return f, checkFilter(f)
	case filter != nil:
		return *filter, checkFilter(*filter)
	}
	return store.Filter{}, badParam("ids", "ids or filter is required")
}
