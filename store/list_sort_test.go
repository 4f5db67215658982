package store_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestListSorted: the listing by failed time (latest death first, ties by
// id) and by queue (A to Z, newest first within) walks every matching
// message exactly once in that order, a keyset page at a time, whatever
// the page size: ties of failed_at across a page's edge, a returned
// message whose id is old but whose death is new, replaying rows, other
// statuses, a queue filter, a failure group and a scope.
func TestListSorted(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	var batch []store.NewMessage
	for i := range 30 {
		m := msg([]string{"orders", "billing", "audit"}[i%3], fmt.Sprintf("body-%d", i), int64(1000+i))
		// Pairs share a failed_at: ties across pages.
		m.FailedAt = base.Add(time.Duration(i/2) * time.Second)
		m.FailureType, m.FailureMessage = "E", []string{"one", "two"}[i%2]
		batch = append(batch, m)
	}
	ingest(t, st, batch...)
	var ids []int64
	rows, err := db.Query(ctx, `SELECT id FROM dead_messages ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	// The oldest message died again a minute ago; two others moved on.
	_, err = db.Exec(ctx, `UPDATE dead_messages SET failed_at = now() - interval '1 minute' WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET status = 'replayed' WHERE id = $1`, ids[4])
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET status = 'replaying', claim_expires_at = now() + interval '1 hour' WHERE id = $1`, ids[7])
	require.NoError(t, err)

	type row struct {
		id    int64
		queue string
		at    time.Time
		st    string
		group string
	}
	all := func() []row {
		rows, err := db.Query(ctx, `SELECT id, source_queue, failed_at, status, to_hex(group_id) FROM dead_messages`)
		require.NoError(t, err)
		var out []row
		for rows.Next() {
			var r row
			require.NoError(t, rows.Scan(&r.id, &r.queue, &r.at, &r.st, &r.group))
			out = append(out, r)
		}
		require.NoError(t, rows.Err())
		return out
	}()
	byFailed := func(a, b row) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return cmp.Compare(b.id, a.id)
	}
	byQueue := func(a, b row) int {
		if c := cmp.Compare(a.queue, b.queue); c != 0 {
			return c
		}
		return cmp.Compare(b.id, a.id)
	}
	want := func(keep func(row) bool, order func(a, b row) int) []int64 {
		var rs []row
		for _, r := range all {
			if keep(r) {
				rs = append(rs, r)
			}
		}
		slices.SortFunc(rs, order)
		out := []int64{}
		for _, r := range rs {
			out = append(out, r.id)
		}
		return out
	}
	walk := func(f store.Filter, sort string, limit int) []int64 {
		out := []int64{}
		opt := store.ListOptions{Limit: limit, Sort: sort}
		for range 100 {
			page, err := st.ListMessages(ctx, f, opt)
			require.NoError(t, err)
			for _, m := range page.Messages {
				out = append(out, m.ID)
			}
			if !page.HasMore {
				require.LessOrEqual(t, len(page.Messages), limit)
				return out
			}
			require.Len(t, page.Messages, limit, "a page before another is full")
			opt.After = page.Last
		}
		t.Fatal("the listing did not end")
		return nil
	}
	pending := func(r row) bool { return r.st == store.StatusPending }
	groupOf := all[0].group
	for _, limit := range []int{1, 2, 3, 7, 50} {
		{
			require.Equal(t, want(pending, byFailed), walk(store.Filter{}, store.SortFailed, limit))
			require.Equal(t, ids[0], walk(store.Filter{}, store.SortFailed, limit)[0], "the latest death first, though its id is the oldest")
			require.Equal(t, want(pending, byQueue), walk(store.Filter{}, store.SortQueue, limit))
			require.Equal(t, want(func(row) bool { return true }, byFailed), walk(store.Filter{Status: "all"}, store.SortFailed, limit))
			require.Equal(t, want(func(row) bool { return true }, byQueue), walk(store.Filter{Status: "all"}, store.SortQueue, limit))
			require.Equal(t, want(func(r row) bool { return pending(r) && r.queue == "billing" }, byFailed),
				walk(store.Filter{SourceQueue: "billing"}, store.SortFailed, limit))
			require.Equal(t, want(func(r row) bool { return pending(r) && r.group == groupOf }, byFailed),
				walk(store.Filter{Group: fmt.Sprintf("%016s", groupOf)}, store.SortFailed, limit))
			require.Equal(t, want(func(r row) bool { return pending(r) && r.queue != "audit" }, byQueue),
				walk(store.Filter{Scope: []string{"orders", "billing"}}, store.SortQueue, limit))
		}
	}
	_, err = st.ListMessages(ctx, store.Filter{Query: "body"}, store.ListOptions{Sort: store.SortFailed})
	require.ErrorIs(t, err, store.ErrInvalidFilter, "a search lists newest first only")
}
