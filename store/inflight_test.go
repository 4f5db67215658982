package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// ingestAs writes one batch of msgs as consumer and dates its
// ingest_inflight row age ago.
func ingestAs(t *testing.T, st *store.Store, db *pgxpool.Pool, consumer string, age time.Duration, msgs ...store.NewMessage) int64 {
	t.Helper()
	ctx := context.Background()
	id := store.NewBatchID()
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: id, Consumer: consumer, Messages: msgs})
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE ingest_inflight SET committed_at = now() - $2::interval WHERE batch_id = $1`, id, age.String())
	require.NoError(t, err)
	return id
}

func inflightBatches(t *testing.T, db *pgxpool.Pool) map[int64]bool {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT batch_id FROM ingest_inflight`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		out[id] = true
	}
	require.NoError(t, rows.Err())
	return out
}

func redelivery(m store.NewMessage) store.NewMessage {
	m.Redelivered = true
	return m
}

// TestDeleteStaleInflight deletes exactly the batches committed before the
// cutoff by consumers other than the live ones, oldest first and at most
// limit at a time; a redelivery of a deleted batch's message is then a new
// row, while one of a kept batch is still recognised.
func TestDeleteStaleInflight(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	live := []string{"dlq-host-7-dlq-0", "dlq-host-7-dlq-1"}

	goneOld := msg("orders", "gone-old", 101)
	staleA := ingestAs(t, st, db, "dlq-host-1-dlq-0", 3*time.Hour, goneOld)
	staleB := ingestAs(t, st, db, "dlq-host-1-dlq-1", 2*time.Hour, msg("orders", "gone-old-2", 102))
	staleC := ingestAs(t, st, db, "dlq-host-2-dlq-0", 90*time.Minute, msg("orders", "gone-old-3", 103))
	liveOld := msg("orders", "live-old", 201)
	keptLive := ingestAs(t, st, db, live[0], 3*time.Hour, liveOld)
	goneNew := msg("orders", "gone-new", 301)
	keptRecent := ingestAs(t, st, db, "dlq-host-1-dlq-0", 10*time.Minute, goneNew)

	lease := func(job string) store.Lease {
		run, ok, err := st.BeginJobRun(ctx, job, "test-holder", time.Now().UTC().Truncate(time.Millisecond), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		return run.Lease
	}
	l := lease("inflight-test")
	cutoff := time.Now().Add(-time.Hour)

	// Oldest first, at most limit.
	n, err := st.DeleteStaleInflight(ctx, l, cutoff, live, 2)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	left := inflightBatches(t, db)
	require.False(t, left[staleA])
	require.False(t, left[staleB])
	require.True(t, left[staleC])

	n, err = st.DeleteStaleInflight(ctx, l, cutoff, live, 2)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "a short batch: nothing else is eligible")
	require.Equal(t, map[int64]bool{keptLive: true, keptRecent: true}, inflightBatches(t, db),
		"a live consumer's batch and a recent batch stay, however old or whoever wrote them")

	n, err = st.DeleteStaleInflight(ctx, l, cutoff, nil, 10)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "with no live consumer, only the age counts")
	require.Equal(t, map[int64]bool{keptRecent: true}, inflightBatches(t, db))

	// What the deletion changes: a redelivery of a deleted batch's message
	// is no longer recognised (it would be stored again), one of a kept
	// batch still is.
	_, res := ingest(t, st, redelivery(goneOld), redelivery(goneNew))
	require.Equal(t, []store.Outcome{store.OutcomeInserted, store.OutcomeDuplicate}, res.Outcomes)

	// Fenced: a lease that moved on deletes nothing.
	ingestAs(t, st, db, "dlq-host-3-dlq-0", 5*time.Hour, msg("orders", "fenced", 401))
	_, err = st.DeleteStaleInflight(ctx, store.Lease{Job: l.Job, Holder: l.Holder, Token: l.Token + 1}, cutoff, live, 10)
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Len(t, inflightBatches(t, db), 3)
}
