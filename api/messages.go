package api

import (
	"net/http"

	"github.com/dlq/dlq/store"
)

type messageList struct {
	Messages   []store.Message `json:"messages"`
	NextCursor *string         `json:"next_cursor"`
	HasMore    bool            `json:"has_more"`
}

// handleListMessages serves GET /api/v1/messages.
func (s *Server) handleListMessages(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	q := queryOf(r)
	f, err := q.filter()
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	opt := store.ListOptions{NoBodySearch: !p.Bodies}
	if opt.Limit, err = q.int("limit", store.ListLimitDefault, 1, store.ListLimitMax); err != nil {
		s.writeErr(w, r, err)
		return
	}
	if opt.IncludeBody, err = q.bool("include_body"); err != nil {
		s.writeErr(w, r, err)
		return
	}
	if opt.IncludeBody && !p.Bodies {
		s.writeErr(w, r, &forbiddenError{msg: "include_body: token " + p.Name + " may not see message bodies"})
		return
	}
	key := canonical(f)
	if c := q.str("cursor"); c != "" {
		if opt.Before, err = decodeCursor(c, key); err != nil {
			s.writeErr(w, r, badParam("cursor", "%v", err))
			return
		}
	}
	if f, err = scoped(p, f); err != nil {
		s.writeErr(w, r, err)
		return
	}
	page, err := s.cfg.Store.ListMessages(r.Context(), f, opt)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	out := messageList{Messages: page.Messages, HasMore: page.HasMore}
	if page.HasMore {
		c := encodeCursor(page.LastID, key)
		out.NextCursor = &c
	}
	writeJSON(w, r, http.StatusOK, out)
}

// handleGetMessage serves GET /api/v1/messages/{id}: one message, with its
// body when the caller may see bodies.
func (s *Server) handleGetMessage(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	m, err := s.cfg.Store.GetMessage(r.Context(), id, p.Queues)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if !p.Bodies {
		m.Body = nil
	}
	writeJSON(w, r, http.StatusOK, m)
}

// handleDeleteMessage serves DELETE /api/v1/messages/{id}.
func (s *Server) handleDeleteMessage(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	id, err := pathID(r, "id")
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if err := s.cfg.Store.DeleteMessageIn(r.Context(), id, p.Queues, actor(r)); err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, store.ActionResult{Action: store.ActionDelete, Matched: 1, Changed: 1})
}

// actor is who a request acts as, for audit rows.
func actor(r *http.Request) store.Actor {
	p := PrincipalFrom(r.Context())
	return store.Actor{Name: p.Name, Role: p.Role, Via: "api", RequestID: RequestID(r.Context()), Scope: p.Queues}
}
