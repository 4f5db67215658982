package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestReplayingRowsAreListedAndFound: the listing and search indexes leave
// replaying rows out (migration 00061), so every listing and search reads
// them in a branch of its own. Rows claimed by a replay must still be
// listed and found by each kind of search (a key, a header value, the
// failure type, fixed failure text, text with a variable part, the body)
// under status=replaying and status=all, in id order with the rest, and
// never under the statuses they are not in.
func TestReplayingRowsAreListedAndFound(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	const queue = "orders"
	var msgs []store.NewMessage
	for i := range 12 {
		m := msg(queue, fmt.Sprintf(`{"order":"body-%02d"}`, i), int64(i+1))
		m.MessageID = fmt.Sprintf("order-msg-%02d", i)
		m.Headers = []byte(fmt.Sprintf(`{"trace_id":"trace-%02d","tenant":"acme"}`, i))
		m.FailureType = "LedgerLocked"
		m.FailureMessage = fmt.Sprintf("ledger %d is locked by batch 77", 10+i)
		msgs = append(msgs, m)
	}
	ingest(t, st, msgs...)
	ids := messageIDs(t, db, "TRUE")
	require.Len(t, ids, 12)

	// Claim every third message, as a replay does.
	task := newTask(t, st, store.Filter{SourceQueue: queue})
	acquire(t, db, task.ID, "runner")
	var claimed []int64
	for i := 0; i < len(ids); i += 3 {
		claimed = append(claimed, ids[i])
	}
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "runner-1", Lease: 60e9, IDs: claimed, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, len(claimed))
	require.Equal(t, len(claimed), count(t, db, "status = 'replaying'"))
	var resting []int64
	for _, id := range ids {
		if !slices.Contains(claimed, id) {
			resting = append(resting, id)
		}
	}

	newestFirst := func(s []int64) []int64 {
		s = slices.Clone(s)
		slices.Sort(s)
		slices.Reverse(s)
		return s
	}
	// list pages through f 2 at a time, so pages and the keyset mix the
	// two branches.
	list := func(f store.Filter, opt store.ListOptions) []int64 {
		t.Helper()
		var got []int64
		opt.Limit = 2
		for {
			page, err := st.ListMessages(ctx, f, opt)
			require.NoError(t, err, "%+v", f)
			for _, m := range page.Messages {
				got = append(got, m.ID)
			}
			if !page.HasMore {
				return got
			}
			opt.Before = page.LastID
		}
	}
	for _, q := range []string{"", "order-msg-03", "TRACE-06", "acme", "LedgerLocked", "is locked by batch", "ledger 19 is locked", "body-09"} {
		want := func(set []int64) []int64 {
			var out []int64
			for i, id := range ids {
				if !slices.Contains(set, id) {
					continue
				}
				switch { // q names one message
				case q == "order-msg-03" && i != 3, q == "TRACE-06" && i != 6,
					q == "ledger 19 is locked" && i != 9, q == "body-09" && i != 9:
					continue
				}
				out = append(out, id)
			}
			return newestFirst(out)
		}
		opt := store.ListOptions{}
		for _, c := range []struct {
			status string
			set    []int64
		}{
			{"replaying", claimed},
			{"all", ids},
			{"pending", resting},
			{"pending,replaying", ids},
			{"replayed,acknowledged", nil},
		} {
			f := store.Filter{Status: c.status, Query: q, SourceQueue: queue}
			require.Equal(t, want(c.set), list(f, opt), "status=%s q=%q", c.status, q)
			if q != "body-09" {
				// Without a source queue (no body search).
				f.SourceQueue = ""
				require.Equal(t, want(c.set), list(f, opt), "status=%s q=%q, every queue", c.status, q)
			}
		}
	}

	// Bulk actions and replay selection read the same filter: a claimed
	// message is selected by status=replaying and a search, and left out
	// of pending.
	p, err := st.PreviewReplay(ctx, store.Filter{Status: "replaying", Query: "order-msg-03"}, 0, 100, 5, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Matched)
	require.Equal(t, []int64{ids[3]}, p.Sample)
	p, err = st.PreviewReplay(ctx, store.Filter{Status: "pending", Query: "order-msg-03"}, 0, 100, 5, 10)
	require.NoError(t, err)
	require.EqualValues(t, 0, p.Matched)
}

// TestListingIndexesLeaveReplayingRowsOut guards migration 00061: a claim
// rewrites its rows, and each rewrite enters every index whose predicate
// the new version matches. Were these indexes whole again, each replayed
// message would cost PostgreSQL five index entries more (docs/BENCHMARKS.md,
// Replay), and nothing else would notice.
func TestListingIndexesLeaveReplayingRowsOut(t *testing.T) {
	t.Parallel()
	_, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	for ix, pred := range map[string]string{
		"dead_messages_status_id":              "WHERE (status = ANY (ARRAY['pending'::text, 'replayed'::text, 'acknowledged'::text]))",
		"dead_messages_queue_status_id":        "WHERE (status = ANY (ARRAY['pending'::text, 'replayed'::text, 'acknowledged'::text]))",
		"dead_messages_group_status_id":        "WHERE (status = ANY (ARRAY['pending'::text, 'replayed'::text, 'acknowledged'::text]))",
		"dead_messages_queue_status_failed_at": "WHERE (status = ANY (ARRAY['pending'::text, 'replayed'::text, 'acknowledged'::text]))",
		"dead_messages_search":                 "WHERE (status <> 'replaying'::text)",
	} {
		var def string
		require.NoError(t, db.QueryRow(context.Background(),
			`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = $1`, ix).Scan(&def), ix)
		require.Contains(t, def, pred, ix)
	}
	// The B-trees name every other status: a new status must join them.
	require.ElementsMatch(t, []string{"pending", "replayed", "acknowledged", "replaying"}, store.Statuses)
}
