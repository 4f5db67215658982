package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
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

			returnEarlierCopy(t, st, x, "body 1", "rid-earlier")
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
				claimAndPublishOne(t, st, db, task.ID, "b2", x, "X is claimed again", "b claimed X again")
			}
			final := requireTaskAddsUp(t, st, db, task.ID, "done")
			require.Zero(t, final.Remaining())
			require.Equal(t, int64(3), final.Claimed, "each message claimed and kept once")
			requireCountersConsistent(t, db)
		})
	}
}

// Claim b1 takes X; an earlier copy of X comes back to dlq (X pending,
// out of b1's claim); the next claim, b2, takes X again, with Y, and may
// have published both; b1's late confirm settles X's item published;
// then b2's holder dies and recovery takes both rows back. X's item is
// settled already, so its row only leaves claimed; Y's item, unsettled,
// is settled unknown (it stays claimed) or waits to be sent again (it
// leaves claimed until it is claimed again).
func TestReplayRecoveryOfASettledItemKeepsClaimed(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{0, 1} {
		t.Run(fmt.Sprintf("unknown_retries=%d", retries), func(t *testing.T) {
			t.Parallel()
			st, db, ids := seededStore(t, 2)
			ctx := context.Background()
			task := retryTask(t, st, db, "orders", retries)
			x, y := ids[0], ids[1]
			res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b1", IDs: []int64{x}, MarkFirst: 1})
			require.Len(t, res.Messages, 1)
			requireTaskAddsUp(t, st, db, task.ID, "b1 claimed X")

			returnEarlierCopy(t, st, x, "body 0", "rid-earlier")
			requireTaskAddsUp(t, st, db, task.ID, "an earlier copy of X came back")

			res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b2", MarkFirst: 2})
			require.Len(t, res.Messages, 2, "b2 takes X again, and Y")
			requireTaskAddsUp(t, st, db, task.ID, "b2 claimed X and Y")

			s, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
				{ID: x, Token: "b1", Result: store.OutcomePublished},
			}, false, "b1")
			require.NoError(t, err)
			require.Equal(t, []int64{0, 1}, []int64{s.Marked, s.Published}, "the row is b2's; the item is settled")
			requireTaskAddsUp(t, st, db, task.ID, "b1's late confirm")

			// b2's holder dies after publishing: its claim runs out.
			_, err = db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 second' WHERE token = 'b2'`)
			require.NoError(t, err)
			_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 second' WHERE claim_owner = 'b2'`)
			require.NoError(t, err)
			got, err := st.RecoverExpiredReplayClaims(ctx, 100)
			require.NoError(t, err)
			require.Equal(t, int64(2), got.Taken)
			require.Equal(t, []int64{int64(1 - retries), int64(retries)}, []int64{got.Unknown, got.Retried}, "Y only")
			requireTaskAddsUp(t, st, db, task.ID, "recovery")

			if retries > 0 {
				claimAndPublishOne(t, st, db, task.ID, "b3", y, "Y is sent again", "b3 claimed Y")
			}
			final := requireTaskAddsUp(t, st, db, task.ID, "done")
			require.Zero(t, final.Remaining())
			require.Equal(t, int64(2), final.Claimed, "each message claimed and kept once")
			requireCountersConsistent(t, db)
		})
	}
}

// A message whose publish had an unknown outcome waits to be sent again,
// out of claimed; one of its copies dies and comes back to dlq, so the
// next claim settles its item published without sending it
// (settleReturned): it was taken and published, and joins claimed as a
// confirmed publish does.
func TestReplayClaimOfACopyThatCameBackCountsItClaimed(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 2)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 3)
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b1"})
	require.Len(t, res.Messages, 2)
	outs := make([]store.ReplayOutcome, len(ids))
	for i, id := range ids {
		outs[i] = store.ReplayOutcome{ID: id, Token: "b1", Result: store.OutcomeRetry, Error: "outcome unknown: lost", CopyReplayCount: 1}
	}
	_, err := st.SettleReplayOutcomes(ctx, task.ID, outs, false, "b1")
	require.NoError(t, err)
	requireTaskAddsUp(t, st, db, task.ID, "both wait to be sent again")

	returnEarlierCopy(t, st, ids[0], "body 0", "rid-a")
	requireTaskAddsUp(t, st, db, task.ID, "a copy of the first came back")

	res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b2"})
	require.Len(t, res.Messages, 1, "only the other one is sent again")
	require.Equal(t, 1, res.Returned)
	requireTaskAddsUp(t, st, db, task.ID, "b2 claimed")

	_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
		{ID: ids[1], Token: "b2", Result: store.OutcomePublished, Attempt: res.Messages[0].Unknowns},
	}, false, "b2")
	require.NoError(t, err)
	final := requireTaskAddsUp(t, st, db, task.ID, "done")
	require.Equal(t, []int64{2, 2, 0}, []int64{final.Published, final.Claimed, final.Remaining()})
	requireCountersConsistent(t, db)
}

// returnEarlierCopy ingests a copy of message id replayed earlier (replay
// id rid, replay count 1) that died again, and checks that ingest
// returned it to id's row.
func returnEarlierCopy(t *testing.T, st *store.Store, id int64, body, rid string) {
	t.Helper()
	back := msg("orders", body, 999)
	back.DLQID, back.ReplayID, back.ReplayCount, back.Redelivered = id, rid, 1, false
	back.Reason = "expired"
	_, r := ingest(t, st, back)
	require.Equal(t, 1, r.Returned)
}

// claimAndPublishOne claims, under token, the one message left to send of
// the task (id, says why), checks the counters, and settles it published.
func claimAndPublishOne(t *testing.T, st *store.Store, db *pgxpool.Pool, taskID int64, token string, id int64, why, step string) {
	t.Helper()
	res := claimAll(t, st, store.ReplayClaim{TaskID: taskID, Token: token})
	require.Len(t, res.Messages, 1, why)
	require.Equal(t, id, res.Messages[0].ID)
	requireTaskAddsUp(t, st, db, taskID, step)
	_, err := st.SettleReplayOutcomes(context.Background(), taskID, []store.ReplayOutcome{
		{ID: id, Token: token, Result: store.OutcomePublished, Attempt: res.Messages[0].Unknowns},
	}, false, token)
	require.NoError(t, err)
}
