package cron

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// olderHeaders are headers with a death record of count n, as the codec
// writes them.
func olderHeaders(queue string, n int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"tenant":"acme","x-death":[{"count":{"type":"int64","value":%d},"exchange":"orders",`+
		`"queue":%q,"reason":"rejected","routing-keys":["orders.created"],"time":{"type":"timestamp","value":"2026-11-20T10:00:0%dZ"}}]}`,
		n, queue, n%10))
}

// ingestOlder stores n pending messages as an older dlq does: no death
// record, no category (the default, unknown), the failure group of an
// unknown category.
func ingestOlder(t testing.TB, st *store.Store, queue, typ string, n int) {
	t.Helper()
	now := time.Now()
	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "older"}
	for i := range n {
		b.Messages = append(b.Messages, store.NewMessage{
			SourceQueue: queue, DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
			FailureType: typ, FailureMessage: fmt.Sprintf("%s at step %d", typ, i),
			Properties: json.RawMessage(`{}`), Headers: olderHeaders(queue, 1+i%3),
			Body: []byte(`{}`), FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i),
		})
	}
	_, err := st.IngestBatch(ctxT(t), b)
	require.NoError(t, err)
	require.NoError(t, st.ConfirmBatches(ctxT(t), []int64{b.ID}))
}

// deathRecords reads every message's death record and category through
// the store, as the API does, by id.
func deathRecords(t testing.TB, st *store.Store) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	var before int64
	for {
		page, err := st.ListMessages(ctxT(t), store.Filter{Status: "all"}, store.ListOptions{Limit: 1000, Before: before})
		require.NoError(t, err)
		for _, m := range page.Messages {
			out[m.ID] = string(m.XDeath)
		}
		if !page.HasMore {
			return out
		}
		before = page.LastID
	}
}

// runBackfills runs the backfills job until no pass is in progress and
// returns how many runs that took.
func runBackfills(t *testing.T, j *backfillsJob, st *store.Store, lease store.Lease) int {
	t.Helper()
	for runs := 1; ; runs++ {
		_, err := j.run(ctxT(t), &Run{Job: JobBackfills, Lease: lease, Logger: testLogger(t)})
		require.NoError(t, err)
		states, err := st.ReadBackfills(ctxT(t))
		require.NoError(t, err)
		require.Len(t, states, 1)
		if !states[0].Running() {
			return runs
		}
		require.Less(t, runs, 1000)
	}
}

// TestBackfillOlderRows: rows an older dlq stored (no death record,
// category unknown) read right before the backfill reaches them (the
// record derived from their headers), and the backfill older_rows writes
// their records and categories, moving them to their groups with every
// counter exact, in a pass that spans several runs. Rows the older dlq
// stores after the pass (a rolling upgrade still going) are found by the
// next one, and so is a row whose death it replaced, whose stale record
// the trigger of migration 00080 cleared.
func TestBackfillOlderRows(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingestOlder(t, st, "orders", "System.TimeoutException", 3000)
	ingestOlder(t, st, "billing", "ValueError", 2000)
	ingestFailures(t, st, "orders", "CardDeclined", "card declined", 500) // this version's rows
	require.EqualValues(t, 5000, countWhere(t, db, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL`))
	before := deathRecords(t, st)
	require.Len(t, before, 5500)
	empty := 0
	for _, rec := range before {
		if rec == "[]" {
			empty++
		}
	}
	require.Equal(t, 500, empty, "the older rows' records are derived from their headers; this version's rows have no death headers")
	groupsMatchMessages(t, db)

	rules, err := category.New(nil, true)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	j, err := newBackfillsJob(st, reg, BackfillsConfig{Rules: rules, Budget: time.Millisecond, Batch: 400, Duty: 1})
	require.NoError(t, err)
	lease := dlqtest.Lease(t, st, JobBackfills)
	runs := runBackfills(t, j, st, lease)
	require.Greater(t, runs, 5, "the pass resumes across runs")
	require.Zero(t, countWhere(t, db, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL`))
	require.Equal(t, before, deathRecords(t, st), "the records read the same once written")
	require.Equal(t, map[string]map[string]int64{
		"System.TimeoutException": {category.Transient: 3000},
		"ValueError":              {category.Permanent: 2000},
		"CardDeclined":            {category.Unknown: 500},
	}, categoryCounts(t, db))
	groupsMatchMessages(t, db)
	require.EqualValues(t, 5000, metricValue(t, reg, "dlq_backfill_rows_total", map[string]string{"backfill": store.BackfillOlderRows}))
	states, err := st.ReadBackfills(ctxT(t))
	require.NoError(t, err)
	require.EqualValues(t, 5000, states[0].DoneEver)
	require.NotNil(t, states[0].FinishedAt)

	// Nothing to do: no pass starts.
	n, err := j.run(ctxT(t), &Run{Job: JobBackfills, Lease: lease, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Zero(t, n)

	// The older dlq is still running: it stores more, and replaces the
	// death of one of this version's rows with a ValueError, as its
	// return to record writes it (no record, no category, the group of
	// an unknown category).
	ingestOlder(t, st, "orders", "System.TimeoutException", 100)
	var id, oldGroup int64
	require.NoError(t, db.QueryRow(ctxT(t), `SELECT id, group_id FROM dead_messages WHERE failure_type = 'CardDeclined' LIMIT 1`).Scan(&id, &oldGroup))
	olderReturn(t, db, id, oldGroup, "ValueError", "invalid literal for int()")
	require.EqualValues(t, 101, countWhere(t, db, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL`), "the trigger cleared the replaced death's record")
	groupsMatchMessages(t, db)

	runBackfills(t, j, st, lease)
	require.Zero(t, countWhere(t, db, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL`))
	require.Equal(t, map[string]map[string]int64{
		"System.TimeoutException": {category.Transient: 3100},
		"ValueError":              {category.Permanent: 2001},
		"CardDeclined":            {category.Unknown: 499},
	}, categoryCounts(t, db))
	groupsMatchMessages(t, db)
	m, err := st.GetMessage(ctxT(t), id, nil)
	require.NoError(t, err)
	require.Contains(t, string(m.XDeath), `"count":7`, "the record of the new death")
}

// olderReturn replaces the death of row id as an older dlq's return to
// record does (fdd4749, store/ingest.go): the death's columns and its
// failure group (the group of an unknown category), nothing of the death
// record or category; the group counters move with it.
func olderReturn(t *testing.T, db *pgxpool.Pool, id, oldGroup int64, typ, msg string) {
	t.Helper()
	ctx := ctxT(t)
	var queue string
	require.NoError(t, db.QueryRow(ctx, `SELECT source_queue FROM dead_messages WHERE id = $1`, id).Scan(&queue))
	group, err := store.ParseGroupID(store.GroupIDOf(queue, "rejected", typ, msg))
	require.NoError(t, err)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	_, err = tx.Exec(ctx, `
UPDATE dead_messages SET
    status = 'pending', reason = 'rejected', death_count = 7, failure = NULL, failure_type = $2,
    failure_message = $3, properties = '{}', headers = $4, failed_at = now(),
    dead_letter_queue = 'dlq', last_death_replay_id = 'r-1',
    replay_count = GREATEST(replay_count, 1), status_changed_at = now(),
    claim_owner = NULL, claim_expires_at = NULL, group_id = $5
WHERE id = $1`, id, typ, msg, string(olderHeaders(queue, 7)), group)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE failure_groups SET pending = pending - 1 WHERE id = $1`, oldGroup)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `
INSERT INTO failure_groups AS g (id, source_queue, reason, failure_type, pattern, sample_message, pending, first_seen, last_seen)
VALUES ($1, $2, 'rejected', $3, $4, $4, 1, now(), now())
ON CONFLICT (id) DO UPDATE SET pending = g.pending + 1`, group, queue, typ, store.NormalizeFailure(msg))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// TestBackfillFenced: a batch under a lease that moved on writes nothing.
func TestBackfillFenced(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingestOlder(t, st, "orders", "TimeoutError", 50)
	lease := dlqtest.Lease(t, st, JobBackfills)
	stale := lease
	stale.Token--
	_, err := st.BackfillOlderRows(ctxT(t), stale, 0, 100, false, func(store.CategoryInput) string { return category.Permanent })
	require.ErrorIs(t, err, store.ErrLeaseLost)
	_, err = st.StartBackfillPass(ctxT(t), stale, store.BackfillOlderRows, 50)
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.EqualValues(t, 50, countWhere(t, db, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL AND category = 'unknown'`))
}
