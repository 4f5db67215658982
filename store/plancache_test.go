package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestRedeliveryMatchAfterTheTableGrew: a connection that matched
// redeliveries while dead_messages was nearly empty (dlq started on a new
// database) matches them through the index once the table has grown, as
// after a broker restart redelivers a few thousand messages into a store of
// millions. PostgreSQL keeps a prepared statement's generic plan per
// connection, costed on the table as it was when the plan was made; on a
// nearly empty table that plan is a sequential scan.
func TestRedeliveryMatchAfterTheTableGrew(t *testing.T) {
	t.Parallel()
	st, dsn, db := oneConnStore(t)

	// A redelivery of the message of an in-flight batch is matched to its
	// row: nothing new is stored.
	redeliver := func(fp int64) {
		t.Helper()
		batch, _ := ingest(t, st, msg("orders", "x", fp))
		again := msg("orders", "x", fp)
		again.Redelivered = true
		_, res := ingest(t, st, again)
		require.Equal(t, 1, res.Duplicates, "redelivery of batch %d", batch)
	}
	for i := range 8 {
		redeliver(int64(1000 + i))
	}

	const more = 10
	read := afterGrowth{
		Template: `SELECT * FROM dead_messages ORDER BY id LIMIT 8`, Rows: 20008,
		Work: func() {
			for i := range more {
				redeliver(int64(2000 + i))
			}
		},
		Arrived: func(stat func(string) int64) bool { return stat("n_tup_ins") >= 20008+more },
	}.seqReads(t, st, dsn, db)
	t.Logf("%d redeliveries read %d rows of dead_messages by sequential scans", more, read)
	require.Less(t, read, int64(20000), fmt.Sprintf("%d redeliveries scanned dead_messages", more))
}

// TestReplayReturnAfterTheTableGrew: a connection that took replayed
// messages back (their new death applied to their rows) while
// dead_messages was nearly empty takes them back through the primary key
// once the table has grown: each return reads and updates one row by id,
// and a plan kept from the small table would scan the large one twice.
func TestReplayReturnAfterTheTableGrew(t *testing.T) {
	t.Parallel()
	st, dsn, db := oneConnStore(t)
	ctx := context.Background()

	const rows = 8
	for i := range rows {
		ingest(t, st, msg("orders", fmt.Sprintf("body %d", i), int64(3000+i)))
	}
	var ids []int64
	require.NoError(t, db.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM dead_messages`).Scan(&ids))
	require.Len(t, ids, rows)
	replays := 0
	// The replayed copy of row i dies again and comes back to it.
	giveBack := func(i int) {
		t.Helper()
		replays++
		back := msg("orders", fmt.Sprintf("body %d", i), int64(4000+replays))
		back.DLQID, back.ReplayID, back.ReplayCount = ids[i], fmt.Sprintf("replay-%d", replays), int64(replays)
		_, res := ingest(t, st, back)
		require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes, "return %d of row %d", replays, ids[i])
	}
	for i := range rows {
		giveBack(i)
	}

	const more = 10
	read := afterGrowth{
		Template: `SELECT * FROM dead_messages ORDER BY id LIMIT 8`, Rows: 20008,
		Work: func() {
			for i := range more {
				giveBack(i % rows)
			}
		},
		Arrived: func(stat func(string) int64) bool { return stat("n_tup_upd") >= rows+more },
	}.seqReads(t, st, dsn, db)
	t.Logf("%d returns read %d rows of dead_messages by sequential scans", more, read)
	require.Less(t, read, int64(20000), fmt.Sprintf("%d returns scanned dead_messages", more))
}

// TestPlanEachTimeWithoutDescriptionCache: a database URL that turns pgx's
// statement description cache off (description_cache_capacity=0, as some
// pooler guides advise) still matches redeliveries and takes replays back,
// whose statements are planned at each run with their described types.
func TestPlanEachTimeWithoutDescriptionCache(t *testing.T) {
	t.Parallel()
	dsn := dlqtest.Schema(t) + "&description_cache_capacity=0"
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)

	first := msg("orders", "x", 1)
	_, res := ingest(t, st, first)
	require.Equal(t, []store.Outcome{store.OutcomeInserted}, res.Outcomes)
	again := first
	again.Redelivered = true
	_, res = ingest(t, st, again)
	require.Equal(t, 1, res.Duplicates, "the redelivery is matched to its row")

	var id int64
	require.NoError(t, dlqtest.DB(t, dsn).QueryRow(ctx, `SELECT id FROM dead_messages`).Scan(&id))
	back := msg("orders", "x", 2)
	back.DLQID, back.ReplayID, back.ReplayCount = id, "replay-1", 1
	_, res = ingest(t, st, back)
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes, "the replayed copy comes back to its row")
}

// TestReplayAfterTheTableGrew: a connection that replayed a few messages
// while dead_messages was small (an operator trying dlq out on a new
// database) claims and settles the next task's messages through the
// primary key once the table holds far more and its statistics were
// refreshed (store.RefreshStatistics, which stands in for autovacuum where
// it is off). A claim reads ids of the task's items and locks their rows;
// with the plan kept from the small table it read the whole table twice
// for each batch (441,912 rows for ten claims at 20,000 stored).
func TestReplayAfterTheTableGrew(t *testing.T) {
	t.Parallel()
	st, dsn, db := oneConnStore(t)
	ctx := context.Background()

	// replay claims every item of a task over queue in batches of two,
	// and settles each batch as published.
	replay := func(queue string) int {
		t.Helper()
		task := newTask(t, st, store.Filter{SourceQueue: queue})
		acquire(t, db, task.ID, "runner")
		var after int64
		claims := 0
		for {
			c, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: fmt.Sprintf("claim-%d-%d", task.ID, claims),
				Lease: time.Minute, After: after, Limit: 2, MaxReplays: 5})
			require.NoError(t, err)
			if c.Scanned == 0 {
				return claims
			}
			claims++
			after = c.Last
			outs := make([]store.ReplayOutcome, len(c.Messages))
			for i, m := range c.Messages {
				outs[i] = store.ReplayOutcome{ID: m.ID, Token: fmt.Sprintf("claim-%d-%d", task.ID, claims-1), Result: store.OutcomePublished,
					Attempt: m.Unknowns}
			}
			_, err = st.SettleReplayOutcomes(ctx, task.ID, outs, false)
			require.NoError(t, err)
		}
	}
	seedPending(t, st, db, "trial", 16)
	require.Equal(t, 8, replay("trial"))

	seedPending(t, st, db, "orders", 20)
	read := afterGrowth{
		Template: `SELECT * FROM dead_messages WHERE source_queue = 'trial' ORDER BY id LIMIT 8`, Rows: 20036,
		// Where autovacuum does not analyse the grown table, the
		// statistics job does (cron, every minute), as here.
		Between: func() {
			done, err := st.RefreshStatistics(ctx, time.Second)
			require.NoError(t, err)
			require.NotEmpty(t, done)
			require.Equal(t, "dead_messages", done[0].Table, "the table with the most changed rows comes first")
			require.False(t, done[0].Skipped)
			require.GreaterOrEqual(t, done[0].Changed, int64(20000))
		},
		Work: func() {
			require.Equal(t, 10, replay("orders"))
			require.Equal(t, 20, count(t, db, "source_queue = 'orders' AND status = 'replayed'"))
		},
		Arrived: func(stat func(string) int64) bool { return stat("n_tup_upd") >= 2*(16+20) },
	}.seqReads(t, st, dsn, db)
	t.Logf("a replay of 20 messages in 10 claims read %d rows of dead_messages by sequential scans", read)
	require.Less(t, read, int64(20000), "a replay's claims and settlements scanned dead_messages")
}

// TestRefreshStatisticsOnlyWhenStale: a table is analysed once more rows
// changed since its last statistics than autovacuum's threshold (50 plus a
// tenth of its rows, the defaults), and not again before.
func TestRefreshStatisticsOnlyWhenStale(t *testing.T) {
	t.Parallel()
	st, dsn, db := oneConnStore(t)
	ctx := context.Background()
	stat := func(col string) int64 { return tableStat(t, db, "dead_messages", col) }
	analysed := func() []string {
		t.Helper()
		done, err := st.RefreshStatistics(ctx, time.Second)
		require.NoError(t, err)
		var names []string
		for _, a := range done {
			require.False(t, a.Skipped, "%s skipped", a.Table)
			names = append(names, a.Table)
		}
		return names
	}
	for _, table := range analysed() { // what the migration and setup left
		require.NotEqual(t, "dead_messages", table)
	}
	// batch stores n rows through a store closed at once, so that their
	// statistics arrive at once.
	batch := func(from, n int) {
		msgs := make([]store.NewMessage, n)
		for i := range msgs {
			msgs[i] = msg("orders", fmt.Sprintf("body %d", from+i), int64(from+i))
		}
		dlqtest.ThroughClosedStore(t, dsn, func(other *store.Store) { ingest(t, other, msgs...) })
	}
	batch(0, 40)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_mod_since_analyze") >= 40 }, "statistics did not arrive")
	require.NotContains(t, analysed(), "dead_messages", "40 rows changed: below the threshold of 50")
	batch(40, 20)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_mod_since_analyze") >= 60 }, "statistics did not arrive")
	require.Contains(t, analysed(), "dead_messages", "60 rows changed")
	require.NotContains(t, analysed(), "dead_messages", "analysed again with nothing changed")
	batch(60, 40)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_mod_since_analyze") >= 40 }, "statistics did not arrive")
	require.NotContains(t, analysed(), "dead_messages", "40 rows changed of 60: below 50 + 6")
}
