package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestOldestPendingAfterADeathAgain: message A is stored first, B after
// it but with an older death; A is replayed and dies again now, back on
// its own row (its id stays the lower). The oldest pending message is B,
// and every reader says so: the overview's and the API's (QueueSummary,
// Stats), the metric's (QueueStatus) and the alerts' (AlertNumbers).
// Before, QueueSummary took the pending message with the lowest id, A,
// just dead again, and disagreed with the others.
func TestOldestPendingAfterADeathAgain(t *testing.T) {
	t.Parallel()
	st, db, _ := seededStore(t, 0)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	a, b := msg("orders", "body a", 1), msg("orders", "body b", 2)
	a.FirstFailedAt, a.FailedAt = now.Add(-3*time.Hour), now.Add(-3*time.Hour)
	b.FirstFailedAt, b.FailedAt = now.Add(-2*time.Hour), now.Add(-2*time.Hour)
	ingest(t, st, a)
	ingest(t, st, b)
	ids := messageIDs(t, db, "source_queue = 'orders'")
	require.Len(t, ids, 2)
	idA := ids[0]

	task := newTask(t, st, store.Filter{SourceQueue: "orders", IDs: []int64{idA}})
	acquire(t, db, task.ID, "runner")
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b1"})
	require.Len(t, res.Messages, 1)
	_, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: idA, Token: "b1", Result: store.OutcomePublished}}, false, "b1")
	require.NoError(t, err)
	back := msg("orders", "body a", 3)
	back.DLQID, back.ReplayID, back.ReplayCount, back.Redelivered = idA, "rid-a", 1, false
	_, r := ingest(t, st, back)
	require.Equal(t, 1, r.Returned, "A died again, back on its own row")
	var failedA time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT failed_at FROM dead_messages WHERE id = $1 AND status = 'pending'`, idA).Scan(&failedA))
	require.True(t, failedA.After(b.FailedAt), "A counts from its new death")

	want := b.FailedAt
	_, queues, err := st.QueueSummary(ctx, nil)
	require.NoError(t, err)
	require.Len(t, queues, 1)
	require.NotNil(t, queues[0].OldestPendingAt)
	require.True(t, want.Equal(*queues[0].OldestPendingAt), "QueueSummary (overview, /api/v1/status): %v, want %v", *queues[0].OldestPendingAt, want)

	stats, err := st.Stats(ctx, nil)
	require.NoError(t, err)
	require.NotNil(t, stats.OldestPending)
	require.True(t, want.Equal(stats.OldestPending.FailedAt), "Stats (/api/v1/stats): %v, want %v", stats.OldestPending.FailedAt, want)
	require.InDelta(t, stats.At.Sub(want).Seconds(), stats.OldestPending.AgeSeconds, 1)

	rep, err := st.QueueStatus(ctx, nil)
	require.NoError(t, err)
	require.Len(t, rep.Queues, 1)
	require.NotNil(t, rep.Queues[0].OldestPendingAt)
	require.True(t, want.Equal(*rep.Queues[0].OldestPendingAt), "QueueStatus (the metric): %v, want %v", *rep.Queues[0].OldestPendingAt, want)

	nums, err := st.AlertNumbers(ctx, 0)
	require.NoError(t, err)
	require.Len(t, nums.Queues, 1)
	require.NotNil(t, nums.Queues[0].OldestPendingAt)
	require.True(t, want.Equal(*nums.Queues[0].OldestPendingAt), "AlertNumbers (the alerts): %v, want %v", *nums.Queues[0].OldestPendingAt, want)
}

// TestOldestPendingIsOneIndexProbe: the oldest pending message of a queue
// is read as the first pending entry of the queue in
// dead_messages_queue_status_failed_at, index only, whatever the number of
// rows (at 10,000,000 rows it reads a few pages: docs/OPERATIONS.md).
func TestOldestPendingIsOneIndexProbe(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seedPending(t, st, db, "orders", 8)
	seedPending(t, st, db, "billing", 8)
	_, err := db.Exec(ctx, `UPDATE dead_messages SET status = 'replayed', replayed_at = now() WHERE id = ANY($1)`, ids[:4])
	require.NoError(t, err)
	growTable(t, dsn, `SELECT * FROM dead_messages ORDER BY id`, 1500, `'failed_at', m.failed_at - g * interval '1 second'`)
	_, err = db.Exec(ctx, `VACUUM ANALYZE dead_messages`)
	require.NoError(t, err)
	rows, err := db.Query(ctx, `EXPLAIN (COSTS OFF) SELECT `+store.OldestPendingSQL("'orders'"))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "Limit", plan)
	require.Contains(t, plan, "Index Only Scan using dead_messages_queue_status_failed_at", plan)
	require.NotContains(t, plan, "Sort", "the index's order is the answer's:\n%s", plan)
}
