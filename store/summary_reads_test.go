package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestJobReadsDuringAFlood: the reads the alert and summary jobs make each
// minute stay off the table while a flood is stored. 20,000 rows arrive in
// two queues within the five minutes the alert counts; the alert's count
// stops at its limit, the list of source queues probes an index per queue,
// and neither reads the table. Before, the count read every row of the
// flood and each probe of the list was a sequential scan of the table.
func TestJobReadsDuringAFlood(t *testing.T) {
	t.Parallel()
	st, dsn, db := oneConnStore(t)
	ctx := context.Background()

	for i := range 4 {
		ingest(t, st, msg(fmt.Sprintf("flood-%d", i%2), "x", int64(i+1)))
	}
	ingest(t, st, msg("calm", "x", 100), msg("calm", "x", 101), msg("calm", "x", 102))
	ingest(t, st, msg("claimed", "x", 200))
	// A queue whose only row is out for replay and whose summary row went
	// missing: only dead_messages can name it.
	_, err := db.Exec(ctx, `UPDATE dead_messages SET status = 'replaying', claim_owner = 'test', claim_expires_at = now() + interval '1 hour'
WHERE source_queue = 'claimed'`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `DELETE FROM queue_summary WHERE source_queue = 'claimed'`)
	require.NoError(t, err)

	growTable(t, dsn, `SELECT * FROM dead_messages WHERE source_queue LIKE 'flood-%' ORDER BY id`, 5000, "")
	// queue_summary as ingest would have left it.
	_, err = db.Exec(ctx, `UPDATE queue_summary SET messages = messages + 10000 WHERE source_queue LIKE 'flood-%' AND status = 'pending'`)
	require.NoError(t, err)

	stat := func(col string) int64 { return tableStat(t, db, "dead_messages", col) }
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

	queues, err := st.SourceQueues(ctx, nil)
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
