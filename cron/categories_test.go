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

// ingestFailures stores n pending messages of queue failing with typ and
// messages "<msg> <i>", uncategorised (as rows stored under other rules),
// in batches. They have a death record, as every row this version's
// ingest stores: rows without one are the backfill older_rows' to
// categorise (backfills_test.go).
func ingestFailures(t testing.TB, st *store.Store, queue, typ, msg string, n int) {
	t.Helper()
	now := time.Now()
	for done := 0; done < n; {
		b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
		for i := done; i < min(n, done+5000); i++ {
			b.Messages = append(b.Messages, store.NewMessage{
				SourceQueue: queue, DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
				FailureType: typ, FailureMessage: fmt.Sprintf("%s %d", msg, i),
				Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{"x-tenant":"acme"}`), XDeath: json.RawMessage(`[]`),
				Body: []byte(`{}`), FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i),
			})
		}
		done += len(b.Messages)
		_, err := st.IngestBatch(ctxT(t), b)
		require.NoError(t, err)
		require.NoError(t, st.ConfirmBatches(ctxT(t), []int64{b.ID}))
	}
}

// runCategories runs the categories job until its pass completes and
// returns how many runs that took.
func runCategories(t *testing.T, st *store.Store, lease store.Lease, rules *category.Rules, budget time.Duration) int {
	t.Helper()
	j, err := newCategoriesJob(st, prometheus.NewRegistry(), CategoriesConfig{Rules: rules, Budget: budget, Batch: 2000})
	require.NoError(t, err)
	for runs := 1; ; runs++ {
		_, err := j.run(ctxT(t), &Run{Job: JobCategories, Lease: lease, Logger: testLogger(t)})
		require.NoError(t, err)
		state, err := st.ReadCategoryState(ctxT(t))
		require.NoError(t, err)
		if state.Pass == nil && state.RulesHash == rules.Hash() {
			return runs
		}
		require.NotNil(t, state.Pass, "run %d left no pass and other rules", runs)
		require.Less(t, runs, 1000)
	}
}

// groupsMatchMessages: every failure group's counters equal its messages
// by status, and each group's messages have the group's category.
func groupsMatchMessages(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	var bad int
	require.NoError(t, db.QueryRow(ctxT(t), `
WITH truth AS (
    SELECT group_id, count(*) FILTER (WHERE status = 'pending') AS p, count(*) FILTER (WHERE status = 'replaying') AS rg,
           count(*) FILTER (WHERE status = 'replayed') AS rd, count(*) FILTER (WHERE status = 'acknowledged') AS a,
           min(category) AS cmin, max(category) AS cmax
    FROM dead_messages GROUP BY group_id)
SELECT count(*) FROM failure_groups g FULL JOIN truth t ON t.group_id = g.id
WHERE coalesce(g.pending, 0) <> coalesce(t.p, 0) OR coalesce(g.replaying, 0) <> coalesce(t.rg, 0)
   OR coalesce(g.replayed, 0) <> coalesce(t.rd, 0) OR coalesce(g.acknowledged, 0) <> coalesce(t.a, 0)
   OR (t.group_id IS NOT NULL AND (t.cmin <> g.category OR t.cmax <> g.category))`).Scan(&bad))
	require.Zero(t, bad, "failure groups disagree with their messages")
}

func categoryCounts(t *testing.T, db *pgxpool.Pool) map[string]map[string]int64 {
	t.Helper()
	rows, err := db.Query(ctxT(t), `SELECT failure_type, category, count(*) FROM dead_messages GROUP BY 1, 2`)
	require.NoError(t, err)
	out := map[string]map[string]int64{}
	for rows.Next() {
		var typ, cat string
		var n int64
		require.NoError(t, rows.Scan(&typ, &cat, &n))
		if out[typ] == nil {
			out[typ] = map[string]int64{}
		}
		out[typ][cat] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// TestCategoriesPassOver100000Rows: rows stored without categories are
// categorised by the job in a pass that spans several runs (each saving
// its place), messages move to the failure groups of their category with
// every counter exact, whatever their status; a change of the rules
// recomputes again and rewrites only the rows whose category changes.
func TestCategoriesPassOver100000Rows(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingestFailures(t, st, "orders", "System.TimeoutException", "The operation has timed out after", 40000)
	ingestFailures(t, st, "orders", "ValueError", "invalid literal for int() with base 10:", 30000)
	ingestFailures(t, st, "billing", "CardDeclined", "card declined by issuer, code", 30000)
	// Some of them in other statuses: the groups' counters of every
	// status follow the messages.
	ids := idsByStatus(t, db)[store.StatusPending]
	require.Len(t, ids, 100000)
	ackIDs(t, st, ids[39000:41000])
	replayIDs(t, st, ids[99000:99500], store.OutcomePublished, false)
	replayIDs(t, st, ids[99500:99600], store.OutcomePublished, true) // left replaying
	groupsMatchMessages(t, db)

	rules, err := category.New(nil, true)
	require.NoError(t, err)
	lease := dlqtest.Lease(t, st, JobCategories)
	runs := runCategories(t, st, lease, rules, 100*time.Millisecond)
	require.Greater(t, runs, 1, "a pass over 100,000 rows resumes across runs")
	require.Equal(t, map[string]map[string]int64{
		"System.TimeoutException": {category.Transient: 40000},
		"ValueError":              {category.Permanent: 30000},
		"CardDeclined":            {category.Unknown: 30000},
	}, categoryCounts(t, db))
	groupsMatchMessages(t, db)
	state, err := st.ReadCategoryState(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, rules.Hash(), state.RulesHash)
	require.NotNil(t, state.CompletedAt)

	stats, err := st.Stats(ctxT(t), nil)
	require.NoError(t, err)
	require.Equal(t, int64(39000), stats.ByCategory[category.Transient].Pending)
	require.Equal(t, int64(1000), stats.ByCategory[category.Transient].Acknowledged)
	require.Equal(t, int64(29000), stats.ByCategory[category.Permanent].Pending)
	require.Equal(t, int64(29400), stats.ByCategory[category.Unknown].Pending)
	require.Equal(t, int64(500), stats.ByCategory[category.Unknown].Replayed)
	require.Equal(t, int64(100), stats.ByCategory[category.Unknown].Replaying)

	// The same rules again: nothing to do.
	j, err := newCategoriesJob(st, prometheus.NewRegistry(), CategoriesConfig{Rules: rules})
	require.NoError(t, err)
	n, err := j.run(ctxT(t), &Run{Job: JobCategories, Lease: lease, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Zero(t, n)

	// A rule of the operator's: card declines are permanent. Only those
	// rows change.
	custom, err := category.New([]category.Rule{{Name: "declined", Category: category.Permanent, Queues: []string{"billing"},
		FailureMessage: `(?i)card declined`}}, true)
	require.NoError(t, err)
	require.NotEqual(t, rules.Hash(), custom.Hash())
	runCategories(t, st, lease, custom, time.Minute)
	state, err = st.ReadCategoryState(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, custom.Hash(), state.RulesHash)
	require.Equal(t, map[string]map[string]int64{
		"System.TimeoutException": {category.Transient: 40000},
		"ValueError":              {category.Permanent: 30000},
		"CardDeclined":            {category.Permanent: 30000},
	}, categoryCounts(t, db))
	groupsMatchMessages(t, db)

	// The filter through the store: every listing arm applies it.
	page, err := st.ListMessages(ctxT(t), store.Filter{SourceQueue: "billing", Category: "transient,unknown"}, store.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, page.Messages)
	page, err = st.ListMessages(ctxT(t), store.Filter{Category: category.Permanent, Query: "declined"}, store.ListOptions{Limit: 5})
	require.NoError(t, err)
	require.Len(t, page.Messages, 5)
	for _, m := range page.Messages {
		require.Equal(t, category.Permanent, m.Category)
	}
}

// TestCategoriesPassRestartsForOtherRules: a pass in progress for other
// rules (another instance's) starts over with this instance's, and a run
// under a lost lease writes nothing.
func TestCategoriesPassRestartsForOtherRules(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingestFailures(t, st, "orders", "TimeoutError", "took too long", 5000)
	a, err := category.New(nil, true)
	require.NoError(t, err)
	b, err := category.New(nil, false)
	require.NoError(t, err)
	lease := dlqtest.Lease(t, st, JobCategories)
	p, err := st.StartCategoryPass(ctxT(t), lease, b.Hash())
	require.NoError(t, err)
	require.NoError(t, st.SaveCategoryPass(ctxT(t), lease, store.CategoryPass{RulesHash: b.Hash(), Cursor: 10, MaxID: p.MaxID}, false))

	stale := lease
	stale.Token--
	_, err = st.RecategorizeBatch(ctxT(t), stale, 0, p.MaxID, 100, false, func(store.CategoryInput) string { return category.Permanent })
	require.ErrorIs(t, err, store.ErrLeaseLost)

	runCategories(t, st, lease, a, time.Minute)
	require.Equal(t, map[string]map[string]int64{"TimeoutError": {category.Transient: 5000}}, categoryCounts(t, db))
	groupsMatchMessages(t, db)
}
