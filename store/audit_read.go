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
	// Within, when set, keeps only the rows a principal of limited queues
	// may read (the operations layer decides who that is). Optional; nil
	// reads every row.
	Within *AuditWithin
}

// AuditWithin names the rows of one principal's queues: those it made or
// approved, and those that provably touched only Queues: recorded with a
// scope inside them (the action was restricted to it in SQL), or whose
// selection names one source queue among them. A row that may have
// touched any queue (ids, or a filter without a queue, by an unscoped
// actor) is left out.
type AuditWithin struct {
	// Name is the principal's token name.
	Name string
	// Queues are its source queues. Required.
	Queues []string
}

// where is the condition on audit_log a that keeps w's rows.
func (w *AuditWithin) where(args *sqlArgs) string {
	name, queues := args.add(w.Name), args.add(w.Queues)
	// An empty scope ({}, which policies configured with queues: []
	// recorded before they recorded none) is every queue, not none. A
	// replay's selection holds its filter under "filter"; every other
	// action's selection is the filter itself.
	return "(a.actor = " + name + " OR a.approved_by = " + name +
		" OR (cardinality(a.scope) > 0 AND a.scope <@ " + queues + "::text[])" +
		" OR coalesce(a.selection->>'source_queue', a.selection#>>'{filter,source_queue}') = ANY(" + queues + "::text[]))"
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
	if q.Within != nil {
		where += " AND " + q.Within.where(&args)
	}
	rows, err := s.pool.Query(ctx, `
SELECT `+auditColumns+`
FROM audit_log a WHERE `+where+` ORDER BY a.id DESC LIMIT `+args.add(limit+1), args...)
	if err != nil {
		return AuditPage{}, fmt.Errorf("store: read audit log: %w", err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		return e, scanAudit(r, &e)
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

// auditColumns are an AuditEntry's columns of audit_log a, as scanAudit
// reads them.
const auditColumns = `a.id, a.at, a.actor, a.role, a.via, a.action, a.selection, a.count, a.request_id, a.detail, a.scope,
       coalesce(a.approved_by, '')`

// scanAudit reads auditColumns into e, then the row's further columns
// into extra.
func scanAudit(r pgx.Row, e *AuditEntry, extra ...any) error {
	err := r.Scan(append([]any{&e.ID, &e.At, &e.Actor, &e.Role, &e.Via, &e.Action, &e.Selection, &e.Count, &e.RequestID, &e.Detail,
		&e.Scope, &e.ApprovedBy}, extra...)...)
	e.At = e.At.UTC()
	return err
}
