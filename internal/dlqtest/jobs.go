package dlqtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// testCtx bounds one helper's work: a test that hangs fails instead.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Lease takes a lease for a job name private to the test, for calling
// fenced store methods directly.
func Lease(t testing.TB, st *store.Store, job string) store.Lease {
	t.Helper()
	run, ok, err := st.BeginJobRun(testCtx(t), job, "test-holder", time.Now().UTC().Truncate(time.Millisecond), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	return run.Lease
}

// InflightRow writes a one-message batch as consumer, dated age ago in
// ingest_inflight, and returns its id.
func InflightRow(t testing.TB, st *store.Store, db *pgxpool.Pool, consumer string, age time.Duration) int64 {
	t.Helper()
	ctx := testCtx(t)
	now := time.Now()
	id := store.NewBatchID()
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: id, Consumer: consumer, Messages: []store.NewMessage{{
		SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
		Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`), Body: []byte("b"),
		FirstFailedAt: now, FailedAt: now, Fingerprint: id,
	}}})
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE ingest_inflight SET committed_at = now() - $2::interval WHERE batch_id = $1`, id, age.String())
	require.NoError(t, err)
	return id
}

// InflightIDs lists the batch ids in ingest_inflight, in order.
func InflightIDs(t testing.TB, db *pgxpool.Pool) []int64 {
	t.Helper()
	rows, err := db.Query(testCtx(t), `SELECT batch_id FROM ingest_inflight ORDER BY batch_id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}
