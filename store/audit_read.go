package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditQuery pages the audit log, newest first.
type AuditQuery struct {
	// Before continues a listing: only rows with a smaller id. 0 starts
	// at the newest.
	Before int64
	// Limit is the page size. Optional; default 50, at most 1000.
	Limit int
	// Actor and Action filter exactly. Optional.
	Actor, Action string
	// Since bounds the time. Optional.
	Since *time.Time
}

// AuditPage is one page of the audit log.
type AuditPage struct {
	Entries []AuditEntry
	HasMore bool
	LastID  int64
}

// Audit reads the audit log, newest first, as a keyset on id.
func (s *Store) Audit(ctx context.Context, q AuditQuery) (AuditPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	if limit > ListLimitMax {
		return AuditPage{}, fmt.Errorf("%w: limit %d is above the maximum %d", ErrInvalidFilter, limit, ListLimitMax)
	}
	var args sqlArgs
	where := "TRUE"
	if q.Before > 0 {
		where += " AND a.id < " + args.add(q.Before)
	}
	if q.Actor != "" {
		where += " AND a.actor = " + args.add(q.Actor)
	}
	if q.Action != "" {
		where += " AND a.action = " + args.add(q.Action)
	}
	if q.Since != nil {
		where += " AND a.at >= " + args.add(*q.Since)
	}
	rows, err := s.pool.Query(ctx, `
SELECT a.id, a.at, a.actor, a.role, a.via, a.action, a.selection, a.count, a.request_id, a.detail, a.scope
FROM audit_log a WHERE `+where+` ORDER BY a.id DESC LIMIT `+args.add(limit+1), args...)
	if err != nil {
		return AuditPage{}, fmt.Errorf("store: read audit log: %w", err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Role, &e.Via, &e.Action, &e.Selection, &e.Count, &e.RequestID, &e.Detail, &e.Scope)
		e.At = e.At.UTC()
		return e, err
	})
	if err != nil {
		return AuditPage{}, fmt.Errorf("store: read audit log: %w", err)
	}
	page := AuditPage{Entries: entries}
	if len(entries) > limit {
		page.Entries, page.HasMore = entries[:limit], true
		page.LastID = entries[limit-1].ID
	}
	return page, nil
}
