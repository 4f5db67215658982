package cron

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestSettledEmptyStoreSkipsFirstPasses: a store settled while empty (as
// dlq serve does before ingest starts) gets a backlog; the summary and
// categories jobs' first runs then count and recompute nothing, and the
// summary is still exact. A store with a row before settling is left to
// the passes, which then walk it.
func TestSettledEmptyStoreSkipsFirstPasses(t *testing.T) {
	t.Parallel()
	rules, err := category.New(nil, true)
	require.NoError(t, err)

	// firstRuns runs each job once and returns the rows the categories
	// pass walked.
	firstRuns := func(st *store.Store, db *pgxpool.Pool) int64 {
		t.Helper()
		var sc SummaryConfig
		sc.setDefaults()
		sj, err := newSummaryJob(st, prometheus.NewRegistry(), sc)
		require.NoError(t, err)
		_, err = sj.run(ctxT(t), &Run{Job: JobSummary, Lease: dlqtest.Lease(t, st, JobSummary), Logger: testLogger(t)})
		require.NoError(t, err)
		cj, err := newCategoriesJob(st, prometheus.NewRegistry(), CategoriesConfig{Rules: rules, Budget: time.Minute, Batch: 2000})
		require.NoError(t, err)
		_, err = cj.run(ctxT(t), &Run{Job: JobCategories, Lease: dlqtest.Lease(t, st, JobCategories), Logger: testLogger(t)})
		require.NoError(t, err)
		sum, err := st.ReadSummaryState(ctxT(t))
		require.NoError(t, err)
		require.NotNil(t, sum.BootstrappedAt)
		cat, err := st.ReadCategoryState(ctxT(t))
		require.NoError(t, err)
		require.Nil(t, cat.Pass)
		require.Equal(t, rules.Hash(), cat.RulesHash)
		var scanned int64
		require.NoError(t, db.QueryRow(ctxT(t), `SELECT pass_scanned FROM category_state`).Scan(&scanned))
		return scanned
	}

	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		st, dsn := dlqtest.Store(t)
		db := dlqtest.DB(t, dsn)
		settled, err := st.SettleEmptyStore(ctxT(t), rules.Hash())
		require.NoError(t, err)
		require.Equal(t, store.EmptyStoreSettled{Summary: true, Categories: true}, settled)
		again, err := st.SettleEmptyStore(ctxT(t), rules.Hash())
		require.NoError(t, err)
		require.Equal(t, store.EmptyStoreSettled{}, again, "settled once")

		ingestFailures(t, st, "orders", "System.TimeoutException", "timed out after", 3000)
		before, err := st.ReadSummaryState(ctxT(t))
		require.NoError(t, err)
		scanned := firstRuns(st, db)
		after, err := st.ReadSummaryState(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, before.LastPassAt, after.LastPassAt, "the summary job counted a pass")
		require.Nil(t, after.PassStartedAt)
		require.Zero(t, scanned, "the categories job walked the rows")
		require.Equal(t, trueCounts(t, db), summaryCounts(t, db))
	})

	t.Run("not empty", func(t *testing.T) {
		t.Parallel()
		st, dsn := dlqtest.Store(t)
		db := dlqtest.DB(t, dsn)
		ingestFailures(t, st, "orders", "System.TimeoutException", "timed out after", 1)
		settled, err := st.SettleEmptyStore(ctxT(t), rules.Hash())
		require.NoError(t, err)
		require.Equal(t, store.EmptyStoreSettled{}, settled)
		ingestFailures(t, st, "orders", "System.TimeoutException", "timed out after", 2999)
		scanned := firstRuns(st, db)
		require.Equal(t, int64(3000), scanned, "the categories pass walks what was stored")
		sum, err := st.ReadSummaryState(ctxT(t))
		require.NoError(t, err)
		require.NotNil(t, sum.LastPassAt, "the summary's bootstrap pass ran")
		require.Equal(t, trueCounts(t, db), summaryCounts(t, db))
	})
}
