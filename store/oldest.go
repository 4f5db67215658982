package store

import (
	"context"
	"fmt"
	"time"
)

// The oldest pending message of a source queue is the pending one with the
// earliest failed_at, the time dlq stored its latest death. Its id tells
// nothing: a replayed message that dies again goes back to its own row
// (ingest_return.go), keeping its low id, with a new failed_at, so the
// pending message with the lowest id may be the youngest. Every reader of
// the age — the overview, GET /api/v1/stats and /api/v1/status
// (QueueSummary), the metric dlq_oldest_pending_age_seconds (QueueStatus)
// and the alert rules (AlertNumbers) — reads it through oldestPendingSQL,
// so that they agree.

// oldestPendingSQL renders the failed_at of the oldest pending message of
// the source queue named by queue (an SQL expression, a column of the
// outer query), NULL when none is pending: the first entry of the queue's
// pending rows in dead_messages_queue_status_failed_at (source_queue,
// status, failed_at), one index-only probe whatever the number of rows
// (docs/BENCHMARKS.md). The status is a literal, so that the planner can
// prove that partial index's predicate.
func oldestPendingSQL(queue string) string {
	return `(SELECT m.failed_at FROM dead_messages m WHERE m.source_queue = ` + queue + ` AND ` +
		statusIn("m", []string{StatusPending}) + ` ORDER BY m.failed_at LIMIT 1)`
}

// summaryRow is one (source queue, status) row of queue_summary; oldest
// is the queue's oldest pending failed_at on its pending row (nil on the
// others, and when nothing is pending).
type summaryRow struct {
	queue, status string
	count         StatusCount
	updated       time.Time
	oldest        *time.Time
}

// queueSummaryRows reads queue_summary, by source queue and status, and
// the database clock: one small table read and one index probe per queue
// with pending messages, whatever the number of stored messages. scope,
// when not nil, restricts the rows to those source queues.
func (s *Store) queueSummaryRows(ctx context.Context, scope []string) (time.Time, []summaryRow, error) {
	rows, err := s.pool.Query(ctx, `
SELECT now(), s.source_queue, s.status, s.messages, s.bytes, s.updated_at,
    CASE WHEN s.status = 'pending' AND s.messages > 0 THEN `+oldestPendingSQL("s.source_queue")+` END
FROM queue_summary s
WHERE $1::text[] IS NULL OR s.source_queue = ANY($1)
ORDER BY s.source_queue, s.status`, scope)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("store: read queue summary (scope %v): %w", scope, err)
	}
	defer rows.Close()
	var (
		at  time.Time
		out []summaryRow
	)
	for rows.Next() {
		var r summaryRow
		if err := rows.Scan(&at, &r.queue, &r.status, &r.count.Messages, &r.count.Bytes, &r.updated, &r.oldest); err != nil {
			return time.Time{}, nil, fmt.Errorf("store: read queue summary (scope %v): %w", scope, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, nil, fmt.Errorf("store: read queue summary (scope %v): %w", scope, err)
	}
	if at.IsZero() {
		if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&at); err != nil {
			return time.Time{}, nil, fmt.Errorf("store: read database clock: %w", err)
		}
	}
	return at.UTC(), out, nil
}
