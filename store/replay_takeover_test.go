package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// requireTaskAddsUp checks a task's counters against its items and rows:
// each of published, failed, unknown and skipped is the number of items
// settled so, published + failed + unknown + skipped + remaining is
// requested, and claimed is what its claims took and did not hand back:
// the items settled published, failed or unknown (each was claimed once,
// whoever settled it: its holder, claim recovery, a later claim that
// finds a copy back from the dead, the task stopping before it sent it
// again) and the rows being replayed for it now.
func requireTaskAddsUp(t *testing.T, st *store.Store, db *pgxpool.Pool, taskID int64, step string) store.ReplayTask {
	t.Helper()
	ctx := context.Background()
	task, err := st.GetReplayTask(ctx, taskID)
	require.NoError(t, err)
	var p, f, u, s, left, replaying int64
	require.NoError(t, db.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE outcome = 'published'), count(*) FILTER (WHERE outcome = 'failed'),
       count(*) FILTER (WHERE outcome = 'unknown'), count(*) FILTER (WHERE outcome = 'skipped'),
       count(*) FILTER (WHERE outcome IS NULL)
FROM replay_task_items WHERE task_id = $1`, taskID).Scan(&p, &f, &u, &s, &left))
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM dead_messages WHERE status = 'replaying' AND replay_task_id = $1`,
		taskID).Scan(&replaying))
	require.Equal(t, []int64{p, f, u, s}, []int64{task.Published, task.Failed, task.Unknown, task.Skipped},
		"%s: published, failed, unknown, skipped against the items", step)
	require.Equal(t, left, task.Remaining(), "%s: remaining against the items", step)
	require.Equal(t, task.Requested, task.Published+task.Failed+task.Unknown+task.Skipped+task.Remaining(),
		"%s: the counters add up to requested", step)
	require.Equal(t, p+f+u+replaying, task.Claimed, "%s: claimed is what claims took and kept", step)
	return task
}

// One runner's claim lapses (its holder stalled), recovery takes its rows
// back, another runner takes the task over, and then the first runner's
// drain lands late: confirms of what it had published, and the rest of
// its batch handed back, as a runner does when it finds its claim lost.
// Every message's outcome is counted once, whoever touched it: the late
// outcomes change nothing, the counters add up after every step, and
// claimed is not taken down a second time for the rows recovery already
// handed back. With on_unknown retry the messages the first runner may
// have published are sent again by the second; with hold they are
// unknown.
func TestReplayTakeoverCountsEachMessageOnce(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{1, 0} {
		t.Run(fmt.Sprintf("unknown_retries=%d", retries), func(t *testing.T) {
			t.Parallel()
			st, dsn := dlqtest.Store(t)
			db := dlqtest.DB(t, dsn)
			ctx := context.Background()
			ids := seedPending(t, st, db, "orders", 8)
			task := retryTask(t, st, db, "orders", retries)
			_, err := db.Exec(ctx, `UPDATE replay_tasks SET runner_owner = 'a', runner_expires_at = now() + interval '1 minute' WHERE id = $1`, task.ID)
			require.NoError(t, err)

			res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "a"})
			require.Len(t, res.Messages, 8)
			// Runner a announced the first four, and two outcomes came in.
			require.NoError(t, st.MarkReplayClaim(ctx, task.ID, "a", ids[3]))
			_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
				{ID: ids[0], Token: "a", Result: store.OutcomePublished},
				{ID: ids[1], Token: "a", Result: store.OutcomeFailed, Error: "NO_ROUTE"},
			}, false)
			require.NoError(t, err)
			requireTaskAddsUp(t, st, db, task.ID, "a settled two")

			// a stalls: its claim and its task lease run out; the rows go back.
			_, err = db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 second' WHERE token = 'a'`)
			require.NoError(t, err)
			_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 second' WHERE claim_owner = 'a'`)
			require.NoError(t, err)
			_, err = db.Exec(ctx, `UPDATE replay_tasks SET runner_expires_at = now() - interval '1 second' WHERE id = $1`, task.ID)
			require.NoError(t, err)
			got, err := st.RecoverExpiredReplayClaims(ctx, 100)
			require.NoError(t, err)
			require.Equal(t, int64(6), got.Taken)
			requireTaskAddsUp(t, st, db, task.ID, "recovery")

			// b takes the task over.
			held, ok, err := st.AcquireReplayTask(ctx, "b", time.Minute, nil)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, task.ID, held.ID)

			// a's drain lands: late confirms, and the rest of its batch
			// handed back (publishBatch, on a claim it finds lost).
			late := []store.ReplayOutcome{
				{ID: ids[2], Token: "a", Result: store.OutcomePublished},
				{ID: ids[3], Token: "a", Result: store.OutcomeRetry, Error: "outcome unknown: lost", CopyReplayCount: 1},
			}
			for _, id := range ids[4:] {
				late = append(late, store.ReplayOutcome{ID: id, Token: "a", Result: store.OutcomeReleased})
			}
			s, err := st.SettleReplayOutcomes(ctx, task.ID, late, false)
			require.NoError(t, err)
			requireTaskAddsUp(t, st, db, task.ID, "a's late drain")
			require.Zero(t, s.Marked, "fenced: a holds none of these rows any more")
			require.Zero(t, s.Published+s.Failed+s.Unknown+s.Retried+s.Released, "and nothing of them is counted: %+v", s)

			// b publishes what is left.
			res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b", MarkFirst: 32})
			want := 6
			if retries == 0 {
				want = 4 // what a may have published is unknown
			}
			require.Len(t, res.Messages, want)
			requireTaskAddsUp(t, st, db, task.ID, "b claimed")
			outs := make([]store.ReplayOutcome, 0, len(res.Messages))
			for _, m := range res.Messages {
				outs = append(outs, store.ReplayOutcome{ID: m.ID, Token: "b", Result: store.OutcomePublished, Attempt: m.Unknowns})
			}
			_, err = st.SettleReplayOutcomes(ctx, task.ID, outs, false)
			require.NoError(t, err)
			final := requireTaskAddsUp(t, st, db, task.ID, "b settled")
			require.Zero(t, final.Remaining())
			require.Equal(t, int64(1), final.Failed)
			if retries == 0 {
				require.Equal(t, []int64{5, 2, 0}, []int64{final.Published, final.Unknown, final.Republished})
			} else {
				require.Equal(t, []int64{7, 0, 2}, []int64{final.Published, final.Unknown, final.Republished})
			}
			require.Equal(t, int64(8), final.Claimed)
			requireCountersConsistent(t, db)
		})
	}
}
