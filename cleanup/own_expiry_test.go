package cleanup

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// The cleanup job writes down the expiry of approval requests past their
// own expires_at (with an audit row, the snapshot freed) and deletes console
// sessions past theirs; requests and sessions still running are left alone.
func TestCleanupExpiresApprovalsAndSessions(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, dsn := dlqtest.Store(t)
	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	for i := range 3 {
		b.Messages = append(b.Messages, store.NewMessage{SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected",
			Properties: []byte(`{}`), Headers: []byte(`{}`), Body: []byte("x"), FirstFailedAt: time.Now(), FailedAt: time.Now(),
			Fingerprint: int64(i)})
	}
	_, err := st.IngestBatch(ctx, b)
	require.NoError(t, err)
	request := func() store.Approval {
		a, err := st.CreateApproval(ctx, store.NewApproval{Action: store.ActionDelete, Request: []byte(`{}`),
			Selection: store.Filter{SourceQueue: "orders"}, TTL: time.Hour, Actor: store.Actor{Name: "jane", Via: "api"}})
		require.NoError(t, err)
		return a
	}
	expired, running := request(), request()
	require.NoError(t, st.CreateConsoleSession(ctx, []byte("old-session-hash"), "jane", time.Now().Add(-time.Minute)))
	require.NoError(t, st.CreateConsoleSession(ctx, []byte("new-session-hash"), "jane", time.Now().Add(time.Hour)))
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1`, expired.ID)
	require.NoError(t, err)

	c, err := New(Config{Store: st, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	n, err := c.DeleteExpired(ctx, dlqtest.Lease(t, st, "own-expiry-test"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "one request expired, one session deleted")

	count := func(sql string, args ...any) (n int) {
		require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}
	require.Equal(t, 1, count(`SELECT count(*) FROM approvals WHERE status = 'expired' AND id = $1`, expired.ID))
	require.Equal(t, 1, count(`SELECT count(*) FROM approvals WHERE status = 'pending' AND id = $1`, running.ID))
	require.Zero(t, count(`SELECT count(*) FROM approval_items WHERE approval_id = $1`, expired.ID), "the snapshot is freed")
	require.Equal(t, 3, count(`SELECT count(*) FROM approval_items WHERE approval_id = $1`, running.ID))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE action = 'approval_expire'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM console_sessions`))
	_, err = st.GetConsoleSession(ctx, []byte("new-session-hash"))
	require.NoError(t, err)
}

// TestCleanupDeletesLargeSnapshots: a finished replay task and an expired
// approval request that each selected more messages than one transaction
// deletes (store.ItemChunk) are deleted whole, a chunk at a time, the
// task with any write-ahead mark of its claims left behind. In one
// statement each, a million rows outlasted the batch's timeout at every
// run, and nothing behind them was ever deleted.
func TestCleanupDeletesLargeSnapshots(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, dsn := dlqtest.Store(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	items := 2*store.ItemChunk + 17
	var task int64
	require.NoError(t, conn.QueryRow(ctx, `
INSERT INTO replay_tasks (status, request, created_at, finished_at, updated_at)
VALUES ('completed', '{}', now() - interval '30 days', now() - interval '30 days', now() - interval '30 days') RETURNING id`).Scan(&task))
	_, err = conn.Exec(ctx, `INSERT INTO replay_task_items (task_id, message_id, outcome) SELECT $1, g, 'published' FROM generate_series(1, $2) g`, task, items)
	require.NoError(t, err)
	// A claim's write-ahead mark that two recoveries left behind.
	_, err = conn.Exec(ctx, `INSERT INTO replay_claims (token, task_id, through_id) VALUES ('left-behind', $1, 5)`, task)
	require.NoError(t, err)
	_, err = st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{{
		SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", Properties: []byte(`{}`), Headers: []byte(`{}`),
		Body: []byte("x"), FirstFailedAt: time.Now(), FailedAt: time.Now(), Fingerprint: 1}}})
	require.NoError(t, err)
	a, err := st.CreateApproval(ctx, store.NewApproval{Action: store.ActionDelete, Request: []byte(`{}`),
		Selection: store.Filter{SourceQueue: "orders"}, TTL: time.Hour, Actor: store.Actor{Name: "jane", Via: "api"}})
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO approval_items (approval_id, message_id) SELECT $1, g FROM generate_series(1000000, 1000000 + $2) g`, a.ID, items)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1`, a.ID)
	require.NoError(t, err)

	c, err := New(Config{Store: st, Registerer: prometheus.NewRegistry(), ReplayTaskTTL: 24 * time.Hour})
	require.NoError(t, err)
	_, err = c.DeleteExpired(ctx, dlqtest.Lease(t, st, "large-snapshots-test"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	count := func(sql string, args ...any) (n int) {
		require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}
	require.Zero(t, count(`SELECT count(*) FROM replay_tasks WHERE id = $1`, task))
	require.Zero(t, count(`SELECT count(*) FROM replay_task_items WHERE task_id = $1`, task))
	require.Zero(t, count(`SELECT count(*) FROM replay_claims WHERE task_id = $1`, task), "a claim's mark outlived its task")
	require.Equal(t, 1, count(`SELECT count(*) FROM approvals WHERE status = 'expired' AND id = $1`, a.ID))
	require.Zero(t, count(`SELECT count(*) FROM approval_items WHERE approval_id = $1`, a.ID))
}

// TestCleanupDeletesOldHourlyCounters: the hourly counters of hours older
// than store.QueueActivityKeep go; the last day's, which stats and the
// console read, stay. They were kept forever, and every read of them
// scanned every hour ever counted.
func TestCleanupDeletesOldHourlyCounters(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, dsn := dlqtest.Store(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `
INSERT INTO queue_activity (source_queue, hour, new)
SELECT q, date_trunc('hour', now()) - h * interval '1 hour', 1
FROM unnest(ARRAY['orders', 'billing']) q, generate_series(0, 24 * 30) h`)
	require.NoError(t, err)

	c, err := New(Config{Store: st, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	_, err = c.DeleteExpired(ctx, dlqtest.Lease(t, st, "activity-test"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	var oldest time.Time
	var rows int
	require.NoError(t, conn.QueryRow(ctx, `SELECT min(hour), count(*) FROM queue_activity`).Scan(&oldest, &rows))
	require.WithinDuration(t, time.Now().Add(-store.QueueActivityKeep), oldest, 2*time.Hour)
	require.Equal(t, 2*8*24, rows, "eight days of hours per queue")
	s, err := st.Stats(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 2*24, s.Last24h.New, "the last day is read as before")
}
