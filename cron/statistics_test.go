package cron

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestStatisticsJobAnalysesGrownTables: with autovacuum off for
// dead_messages, the statistics job analyses it once it has grown past
// autovacuum's threshold, on its schedule, and leaves it alone while it
// has not changed since.
func TestStatisticsJobAnalysesGrownTables(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	_, err := db.Exec(ctx, `ALTER TABLE dead_messages SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	analyses := func() int64 {
		t.Helper()
		return countWhere(t, db, `SELECT analyze_count FROM pg_stat_user_tables WHERE relid = 'dead_messages'::regclass`)
	}
	before := analyses()
	dlqtest.ThroughClosedStore(t, dsn, func(other *store.Store) { ingest(t, other, db, "orders", 300, 10) })
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return countWhere(t, db, `SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = 'dead_messages'::regclass`) >= 300
	}, "the rows' statistics did not arrive")

	svc, err := New(Config{
		Store: st, Logger: testLogger(t), Registerer: prometheus.NewRegistry(), Instance: "solo",
		Schedules: Only(Schedules{Statistics: "@every 200ms"}),
	})
	require.NoError(t, err)
	svc.Start()
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })

	// A finished run that analysed a table.
	finished := func() (done int, analysed int64) {
		t.Helper()
		runs, err := st.JobRuns(ctx, JobStatistics, 1000)
		require.NoError(t, err)
		for _, r := range runs {
			require.NotEqual(t, store.JobFailure, r.Outcome, r.Error)
			if r.Outcome == store.JobSuccess {
				done++
				analysed += r.RowsAffected
			}
		}
		return done, analysed
	}
	dlqtest.Eventually(t, 30*time.Second, func() bool { _, a := finished(); return a >= 1 },
		"no run of the statistics job analysed a table")
	require.Greater(t, analyses(), before, "dead_messages was not analysed")

	// Nothing changed since: later runs analyse nothing.
	after := analyses()
	n, _ := finished()
	waitJob(t, st, JobStatistics, n+3)
	require.Equal(t, after, analyses(), "dead_messages analysed again without a change")
	require.NoError(t, svc.Stop(context.Background()))
}
