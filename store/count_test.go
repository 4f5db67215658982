package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// CountMessages answers from the counter tables when they know the answer,
// counts a selective filter within its budget, and otherwise estimates,
// saying which it did.
func TestCountMessages(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seed(t, st, db, []string{"orders", "billing"}, 40, timeoutFailure)
	// Ten orders acknowledged; the first ten of billing an hour old.
	_, err := st.Acknowledge(ctx, store.Filter{IDs: ids[:10]}, store.Actor{Name: "t"}, store.ActionOptions{})
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET failed_at = now() - interval '1 hour' WHERE id = ANY($1)`, ids[40:50])
	require.NoError(t, err)
	// Seven of them recategorised: no counter table knows categories.
	_, err = db.Exec(ctx, `UPDATE dead_messages SET category = 'permanent' WHERE id = ANY($1)`, ids[20:27])
	require.NoError(t, err)
	group := store.GroupIDOf("orders", "rejected", "TimeoutError", "upstream took 1000ms for order 0")
	hourAgo := time.Now().Add(-30 * time.Minute)
	exact := func(n int64) store.Total { return store.Total{Value: n, Exact: true} }

	for name, c := range map[string]struct {
		f    store.Filter
		want store.Total
	}{
		"pending, every queue":    {store.Filter{}, exact(70)},
		"every status":            {store.Filter{Status: "all"}, exact(80)},
		"one queue":               {store.Filter{SourceQueue: "orders", Status: "all"}, exact(40)},
		"acknowledged":            {store.Filter{Status: "acknowledged"}, exact(10)},
		"scope":                   {store.Filter{Scope: []string{"billing"}}, exact(40)},
		"reason":                  {store.Filter{Reason: "rejected", SourceQueue: "billing"}, exact(40)},
		"other reason":            {store.Filter{Reason: "expired"}, exact(0)},
		"group, every status":     {store.Filter{Group: group, Status: "all"}, exact(20)},
		"group, pending":          {store.Filter{Group: group}, exact(15)},
		"time range, counted":     {store.Filter{SourceQueue: "billing", FailedBefore: &hourAgo}, exact(10)},
		"search key, counted":     {store.Filter{Query: "orders-3", Status: "all"}, exact(1)},
		"ids, counted":            {store.Filter{IDs: ids[5:15], Status: "all"}, exact(10)},
		"ids, pending, counted":   {store.Filter{IDs: ids[5:15]}, exact(5)},
		"time range, scoped away": {store.Filter{FailedBefore: &hourAgo, Scope: []string{"orders"}}, exact(0)},
		"category, counted":       {store.Filter{Category: "permanent", Status: "all"}, exact(7)},
	} {
		// A budget no loaded machine reaches: these rows are to be
		// counted in full (on a saturated test machine a search's count
		// once took longer than the default 100 ms and came back an
		// estimate); the estimates past the cap are checked below.
		got, err := st.CountMessages(ctx, c.f, store.CountOptions{Budget: time.Minute})
		require.NoError(t, err, name)
		require.Equal(t, c.want, got, name)
	}

	// Past the cap the count stops and the answer is an estimate: at least
	// what was counted, at most what the counter tables hold for the
	// filter's queue and status.
	since := time.Now().Add(-10 * time.Minute)
	got, err := st.CountMessages(ctx, store.Filter{SourceQueue: "billing", FailedAfter: &since}, store.CountOptions{Cap: 5})
	require.NoError(t, err)
	require.False(t, got.Exact, "%+v", got)
	require.GreaterOrEqual(t, got.Value, int64(5))
	require.LessOrEqual(t, got.Value, int64(40))

	got, err = st.CountMessages(ctx, store.Filter{IDs: ids[:30], Status: "all", FailedAfter: &since}, store.CountOptions{Cap: 3})
	require.NoError(t, err)
	require.False(t, got.Exact)
	require.GreaterOrEqual(t, got.Value, int64(3))
	require.LessOrEqual(t, got.Value, int64(30), "never more than the ids named")

	_, err = st.CountMessages(ctx, store.Filter{Status: "lost"}, store.CountOptions{})
	require.ErrorIs(t, err, store.ErrInvalidFilter)
}
