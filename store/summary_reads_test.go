package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestJobReadsDuringAFlood: the reads the alert and summary jobs make each
// minute stay off the table while a flood is stored. 20,000 rows arrive in
// two queues within the five minutes the alert counts; the alert's count
// stops at its limit, the list of source queues probes an index per queue,
// and neither reads the table. Before, the count read every row of the
// flood and each probe of the list was a sequential scan of the table.
func TestJobReadsDuringAFlood(t *testing.T) {
	t.Parallel()
	dsn := dlqtest.Schema(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	db := dlqtest.DB(t, dsn)
	_, err = db.Exec(ctx, `ALTER TABLE dead_messages SET (autovacuum_enabled = false)`)
	require.NoError(t, err)

	for i := range 4 {
		ingest(t, st, msg(fmt.Sprintf("flood-%d", i%2), "x", int64(i+1)))
	}
	ingest(t, st, msg("calm", "x", 100), msg("calm", "x", 101), msg("calm", "x", 102))
	ingest(t, st, msg("claimed", "x", 200))
	// A queue whose only row is out for replay and whose summary row went
	// missing: only dead_messages can name it.
	_, err = db.Exec(ctx, `UPDATE dead_messages SET status = 'replaying', claim_owner = 'test', claim_expires_at = now() + interval '1 hour'
WHERE source_queue = 'claimed'`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `DELETE FROM queue_summary WHERE source_queue = 'claimed'`)
	require.NoError(t, err)

	grow, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	_, err = grow.Exec(ctx, `INSERT INTO dead_messages
SELECT r.* FROM (SELECT * FROM dead_messages WHERE source_queue LIKE 'flood-%' ORDER BY id) m, generate_series(1, 5000) g,
    jsonb_populate_record(NULL::dead_messages,
        to_jsonb(m) || jsonb_build_object('id', nextval(pg_get_serial_sequence('dead_messages', 'id')), 'ingest_batch', NULL,
            'message_id', m.message_id || '-' || g)) r`)
	require.NoError(t, err)
	// queue_summary as ingest would have left it.
	_, err = grow.Exec(ctx, `UPDATE queue_summary SET messages = messages + 10000 WHERE source_queue LIKE 'flood-%' AND status = 'pending'`)
	require.NoError(t, err)
	require.NoError(t, grow.Close(ctx))

	stat := func(col string) int64 {
		var n int64
		require.NoError(t, db.QueryRow(ctx, `SELECT pg_stat_clear_snapshot()`).Scan(new(any)))
		require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(`+col+`, 0) FROM pg_stat_user_tables WHERE relid = 'dead_messages'::regclass`).Scan(&n))
		return n
	}
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_tup_ins") == 20008 },
		"the flood's statistics did not arrive")
	seqBefore, fetchBefore := stat("seq_tup_read"), stat("idx_tup_fetch")

	const limit = 1001
	nums, err := st.AlertNumbers(ctx, limit)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, q := range nums.Queues {
		got[q.SourceQueue] = q.NewLast5m
	}
	require.Equal(t, map[string]int64{"flood-0": limit, "flood-1": limit, "calm": 3}, got,
		"the count stops at the limit, and is exact below it")
	none, err := st.AlertNumbers(ctx, 0)
	require.NoError(t, err)
	for _, q := range none.Queues {
		require.Zero(t, q.NewLast5m, "a limit of 0 counts nothing (%s)", q.SourceQueue)
	}

	queues, err := st.SourceQueues(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"calm", "claimed", "flood-0", "flood-1"}, queues)

	st.Close() // its statistics are written as its connection ends
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("idx_tup_fetch") > fetchBefore },
		"the reads' statistics did not arrive")
	seq, fetched := stat("seq_tup_read")-seqBefore, stat("idx_tup_fetch")-fetchBefore
	t.Logf("rows read by sequential scans %d, fetched through indexes %d", seq, fetched)
	require.Less(t, seq, int64(1000), "the jobs' reads scanned dead_messages")
	require.Less(t, fetched, int64(4*limit), "the jobs' reads fetched the flood's rows")
}
