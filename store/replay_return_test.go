package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// While task b holds message X claimed, an earlier replayed copy of X dies
// again and comes back to dlq: ingest returns it to X's row, which leaves
// replaying (pending, no claim) and so leaves b's claimed count. Whatever b
// then records for X — its batch handed back (fenced: the row is no longer
// b's), a confirm of its own publish, a nack, an unknown outcome it sends
// again — claimed stays what b's claims took and kept, the message claimed
// again and published counting once, never negative nor above requested.
func TestReplayReturnDuringClaimKeepsClaimed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		result string
		// settled: b's outcome settles X's item; else b claims it again
		// and publishes it.
		settled bool
	}{
		{store.OutcomeReleased, false},
		{store.OutcomeRetry, false},
		{store.OutcomePublished, true},
		{store.OutcomeFailed, true},
	} {
		t.Run(c.result, func(t *testing.T) {
			t.Parallel()
			st, db, ids := seededStore(t, 3)
			ctx := context.Background()
			task := retryTask(t, st, db, "orders", 1)
			x := ids[1]
			res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b1"})
			require.Len(t, res.Messages, 3)
			requireTaskAddsUp(t, st, db, task.ID, "b claimed")

			back := msg("orders", "body 1", 999)
			back.DLQID, back.ReplayID, back.ReplayCount, back.Redelivered = x, "rid-earlier", 1, false
			back.Reason = "expired"
			_, r := ingest(t, st, back)
			require.Equal(t, 1, r.Returned)
			requireTaskAddsUp(t, st, db, task.ID, "an earlier copy came back")

			outs := []store.ReplayOutcome{
				{ID: ids[0], Token: "b1", Result: store.OutcomePublished},
				{ID: x, Token: "b1", Result: c.result, Error: "nack", CopyReplayCount: 2},
				{ID: ids[2], Token: "b1", Result: store.OutcomePublished},
			}
			s, err := st.SettleReplayOutcomes(ctx, task.ID, outs, false, "b1")
			require.NoError(t, err)
			require.Equal(t, int64(2), s.Marked, "X's row is no longer b1's")
			requireTaskAddsUp(t, st, db, task.ID, "b1 settled")

			if !c.settled {
				res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b2"})
				require.Len(t, res.Messages, 1, "X is claimed again")
				require.Equal(t, x, res.Messages[0].ID)
				requireTaskAddsUp(t, st, db, task.ID, "b claimed X again")
				_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
					{ID: x, Token: "b2", Result: store.OutcomePublished, Attempt: res.Messages[0].Unknowns},
				}, false, "b2")
				require.NoError(t, err)
			}
			final := requireTaskAddsUp(t, st, db, task.ID, "done")
			require.Zero(t, final.Remaining())
			require.Equal(t, int64(3), final.Claimed, "each message claimed and kept once")
			requireCountersConsistent(t, db)
		})
	}
}
