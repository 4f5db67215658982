package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Audit actions written by the cleanup jobs.
const (
	AuditActionRetention   = "retention"
	AuditActionEvict       = "evict"
	AuditActionExpireAudit = "expire_audit"
)

// cleanupActor is who the cleanup jobs are in the audit log.
func cleanupActor(l Lease) Actor {
	return Actor{Name: "cleanup", Via: "cron", RequestID: fmt.Sprintf("%s/%d", l.Job, l.Token)}
}

// RetentionStatuses are the statuses retention may delete, each aged by the
// column that says when the message reached it. Pending and replaying
// messages are never deleted by age: they are work not yet done.
var RetentionStatuses = []string{StatusReplayed, StatusAcknowledged}

// DeleteResult is what one cleanup batch deleted.
type DeleteResult struct {
	Messages int64
	Bytes    int64
	// ByStatus splits the deletion by the status the messages had.
	ByStatus map[string]StatusCount
}

func (r *DeleteResult) add(o DeleteResult) {
	r.Messages += o.Messages
	r.Bytes += o.Bytes
	for st, c := range o.ByStatus {
		if r.ByStatus == nil {
			r.ByStatus = map[string]StatusCount{}
		}
		p := r.ByStatus[st]
		p.Messages += c.Messages
		p.Bytes += c.Bytes
		r.ByStatus[st] = p
	}
}

// DeleteResolvedBefore deletes up to limit messages of status (replayed or
// acknowledged) that reached it before cutoff, under l, in one transaction
// that also adjusts queue_summary and writes one audit row. Rows locked by
// someone else (an operator acting on them right now) are skipped, so the
// batch never waits on them; a short batch therefore does not prove nothing
// is left, only that the rest is busy.
func (s *Store) DeleteResolvedBefore(ctx context.Context, l Lease, status string, cutoff time.Time, limit int) (DeleteResult, error) {
	var col string
	switch status {
	case StatusReplayed:
		col = "replayed_at"
	case StatusAcknowledged:
		col = "acknowledged_at"
	default:
		return DeleteResult{}, fmt.Errorf("store: retention of %q messages: only %v expire by age", status, RetentionStatuses)
	}
	// col is one of two constants above, never input.
	q := `
pick AS (
    SELECT id FROM dead_messages
    WHERE status = $1 AND ` + col + ` < $2
    ORDER BY ` + col + `
    LIMIT $3
    FOR UPDATE SKIP LOCKED
),
del AS (
    DELETE FROM dead_messages m USING pick
    WHERE m.id = pick.id AND m.status = $1
    RETURNING m.source_queue, m.group_id, m.status, m.body_size
)`
	var res DeleteResult
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		var err error
		res, err = deleteAccounted(ctx, tx, q, status, cutoff, limit)
		if err != nil || res.Messages == 0 {
			return err
		}
		return insertAudit(ctx, tx, cleanupActor(l), AuditActionRetention,
			map[string]any{"status": status, "resolved_before": cutoff.UTC()}, res.Messages,
			map[string]any{"bytes": res.Bytes, "job": l.Job, "holder": l.Holder, "token": l.Token})
	})
	if err != nil {
		return DeleteResult{}, fmt.Errorf("store: delete %s messages resolved before %s: %w", status, cutoff.Format(time.RFC3339), err)
	}
	return res, nil
}

// Eviction classes, in the order the capacity policy takes them.
const (
	// EvictResolved takes replayed and acknowledged messages, oldest
	// resolution (replayed_at, acknowledged_at) first.
	EvictResolved = "resolved"
	// EvictPending takes pending messages in arrival order (id), oldest
	// first. Only when the configuration explicitly allows it.
	EvictPending = "pending"
)

// EvictOldest deletes up to limit messages of class (EvictResolved or
// EvictPending), oldest first, under l, adjusting queue_summary and writing
// one audit row with action "evict" and reason in its detail. Replaying
// messages are never evicted.
func (s *Store) EvictOldest(ctx context.Context, l Lease, class string, limit int, reason map[string]any) (DeleteResult, error) {
	var q string
	switch class {
	case EvictResolved:
		// Each arm walks its partial index in resolution order; the merge
		// keeps the overall order. Both arms lock their candidates, the
		// delete takes the oldest limit of them.
		q = `
r AS (
    SELECT id, replayed_at AS t FROM dead_messages
    WHERE status = 'replayed' ORDER BY replayed_at LIMIT $1 FOR UPDATE SKIP LOCKED
), a AS (
    SELECT id, acknowledged_at AS t FROM dead_messages
    WHERE status = 'acknowledged' ORDER BY acknowledged_at LIMIT $1 FOR UPDATE SKIP LOCKED
), pick AS (
    SELECT id FROM (SELECT * FROM r UNION ALL SELECT * FROM a) x ORDER BY t NULLS FIRST, id LIMIT $1
),
del AS (
    DELETE FROM dead_messages m USING pick
    WHERE m.id = pick.id AND m.status IN ('replayed', 'acknowledged')
    RETURNING m.source_queue, m.group_id, m.status, m.body_size
)`
	case EvictPending:
		q = `
pick AS (
    SELECT id FROM dead_messages WHERE status = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
),
del AS (
    DELETE FROM dead_messages m USING pick
    WHERE m.id = pick.id AND m.status = 'pending'
    RETURNING m.source_queue, m.group_id, m.status, m.body_size
)`
	default:
		return DeleteResult{}, fmt.Errorf("store: evict %q messages: class must be %s or %s", class, EvictResolved, EvictPending)
	}
	var res DeleteResult
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		var err error
		res, err = deleteAccounted(ctx, tx, q, limit)
		if err != nil || res.Messages == 0 {
			return err
		}
		detail := map[string]any{"bytes": res.Bytes, "by_status": res.ByStatus, "job": l.Job, "holder": l.Holder, "token": l.Token}
		for k, v := range reason {
			detail[k] = v
		}
		return insertAudit(ctx, tx, cleanupActor(l), AuditActionEvict, map[string]any{"class": class}, res.Messages, detail)
	})
	if err != nil {
		return DeleteResult{}, fmt.Errorf("store: evict %s messages: %w", class, err)
	}
	return res, nil
}

// deleteAccounted runs q, common table expressions ending with one named
// del that deletes and returns source_queue, group_id, status and body_size, and applies the matching decrements to
// queue_summary, failure_groups and queue_activity in the same transaction
// (applyStatusDeltas, which keeps the shared lock order).
func deleteAccounted(ctx context.Context, tx pgx.Tx, q string, args ...any) (DeleteResult, error) {
	rows, err := tx.Query(ctx, `WITH `+q+`
SELECT source_queue, group_id, status, NULL::text, count(*), coalesce(sum(body_size), 0)::bigint
FROM del GROUP BY 1, 2, 3`, args...)
	if err != nil {
		return DeleteResult{}, err
	}
	moves, err := statusMovesSQL(rows)
	if err != nil {
		return DeleteResult{}, err
	}
	var res DeleteResult
	for _, m := range moves {
		res.add(DeleteResult{Messages: m.Messages, Bytes: m.Bytes,
			ByStatus: map[string]StatusCount{m.From: {Messages: m.Messages, Bytes: m.Bytes}}})
	}
	if err := applyStatusDeltas(ctx, tx, moves); err != nil {
		return DeleteResult{}, err
	}
	return res, nil
}

// DeleteAuditBefore deletes up to limit audit rows older than cutoff, under
// l, and records that it did in a new audit row. Audit retention is off
// unless configured: the log is otherwise append-only.
func (s *Store) DeleteAuditBefore(ctx context.Context, l Lease, cutoff time.Time, limit int) (int64, error) {
	var n int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM audit_log WHERE id IN (
    SELECT id FROM audit_log WHERE at < $1 ORDER BY at, id LIMIT $2)`, cutoff, limit)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if n == 0 {
			return nil
		}
		return insertAudit(ctx, tx, cleanupActor(l), AuditActionExpireAudit,
			map[string]any{"before": cutoff.UTC()}, n, nil)
	})
	if err != nil {
		return 0, fmt.Errorf("store: delete audit rows before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return n, nil
}

// finishedTaskSQL selects up to $2 replay tasks that finished (completed,
// cancelled, failed, canary_failed) before $1, oldest first.
const finishedTaskSQL = `
        SELECT id FROM replay_tasks
        WHERE created_at < $1
          AND status IN ('completed', 'cancelled', 'failed', 'canary_failed')
          AND coalesce(finished_at, updated_at) < $1
        ORDER BY created_at, id LIMIT $2`

// RoomForAnother reports whether ctx leaves time for another step like
// one that just took took (twice that, and a second): a chunked deletion
// stops before its batch's timeout rather than fail it, keeping what it
// deleted, and the next run goes on.
func RoomForAnother(ctx context.Context, took time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) >= 2*took+time.Second
}

// ItemChunk is how many snapshot rows (a replay task's items, an expired
// approval's selection) one transaction of the cleanup deletes.
const ItemChunk = 20_000

// DeleteFinishedReplayTasksBefore deletes up to limit replay tasks that
// finished before cutoff, with their items, under l. Tasks still scheduled
// or running are never touched. A task can have a million items: they go
// first, ItemChunk at a time, each chunk committed, and the call returns
// early (having deleted no task, with the items it did delete gone for
// good) when ctx's deadline would not allow another chunk. One statement
// for all of them outlasted the batch's timeout at every run, so neither
// that task nor any after it was ever deleted.
func (s *Store) DeleteFinishedReplayTasksBefore(ctx context.Context, l Lease, cutoff time.Time, limit int) (int64, error) {
	for {
		start := time.Now()
		var items int64
		err := s.fenced(ctx, l, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `
DELETE FROM replay_task_items WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM replay_task_items WHERE task_id IN (`+finishedTaskSQL+`) LIMIT $3))`, cutoff, limit, ItemChunk)
			items = tag.RowsAffected()
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("store: delete items of replay tasks finished before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		if items < ItemChunk {
			break
		}
		if !RoomForAnother(ctx, time.Since(start)) {
			return 0, nil // the next run goes on
		}
	}
	var n int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		// The items go in the same statement: they have no foreign key
		// (migration 00062), which the snapshot paid for on every item.
		// So do write-ahead marks of the task's claims that outlived them:
		// two recoveries splitting one claim's rows each saw the other's
		// still replaying, and neither dropped the mark
		// (dropSpentClaimMarks).
		return tx.QueryRow(ctx, `
WITH t AS (
    DELETE FROM replay_tasks WHERE id IN (`+finishedTaskSQL+`)
    RETURNING id
), i AS (
    DELETE FROM replay_task_items WHERE task_id IN (SELECT id FROM t)
), c AS (
    DELETE FROM replay_claims WHERE task_id IN (SELECT id FROM t)
)
SELECT count(*) FROM t`, cutoff, limit).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("store: delete replay tasks finished before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return n, nil
}
