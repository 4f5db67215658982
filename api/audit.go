package api

import (
	"net/http"
	"time"

	"github.com/dlq/dlq/store"
)

type auditList struct {
	Entries    []store.AuditEntry `json:"entries"`
	NextCursor *string            `json:"next_cursor"`
	HasMore    bool               `json:"has_more"`
}

// handleAudit serves GET /api/v1/audit: who did what, newest first.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := queryOf(r)
	aq := store.AuditQuery{Actor: q.str("actor"), Action: q.str("action")}
	var err error
	if aq.Limit, err = q.int("limit", store.ListLimitDefault, 1, store.ListLimitMax); err != nil {
		s.writeErr(w, r, err)
		return
	}
	if aq.Since, err = q.time("since"); err != nil {
		s.writeErr(w, r, err)
		return
	}
	since := ""
	if aq.Since != nil {
		since = aq.Since.UTC().Format(time.RFC3339Nano)
	}
	key := "audit\x00" + aq.Actor + "\x00" + aq.Action + "\x00" + since
	if c := q.str("cursor"); c != "" {
		if aq.Before, err = decodeCursor(c, key); err != nil {
			s.writeErr(w, r, badParam("cursor", "%v", err))
			return
		}
	}
	page, err := s.cfg.Store.Audit(r.Context(), aq)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	out := auditList{Entries: page.Entries, HasMore: page.HasMore}
	if page.HasMore {
		c := encodeCursor(page.LastID, key)
		out.NextCursor = &c
	}
	writeJSON(w, r, http.StatusOK, out)
}
