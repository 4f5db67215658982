package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// retryTask records a task of the messages of queue that sends a message
// whose outcome is unknown again up to retries times.
func retryTask(t *testing.T, st *store.Store, db *pgxpool.Pool, queue string, retries int) store.ReplayTask {
	t.Helper()
	task, err := st.CreateReplayTask(context.Background(), store.NewReplayTask{
		Selection: store.Filter{SourceQueue: queue}, MaxItems: 1_000_000, Request: json.RawMessage(`{}`),
		Actor: replayActor, UnknownRetries: retries,
	})
	require.NoError(t, err)
	require.Equal(t, retries, task.UnknownRetries)
	acquire(t, db, task.ID, "runner")
	return task
}

// item reads a task's item of a message.
type itemState struct {
	outcome, detail *string
	unknowns        *int
	copyCount       *int64
}

func itemOf(t *testing.T, db *pgxpool.Pool, task, id int64) itemState {
	t.Helper()
	var s itemState
	require.NoError(t, db.QueryRow(context.Background(), `
SELECT outcome, detail, unknown_count, copy_replay_count FROM replay_task_items WHERE task_id = $1 AND message_id = $2`,
		task, id).Scan(&s.outcome, &s.detail, &s.unknowns, &s.copyCount))
	return s
}

func claimAll(t *testing.T, st *store.Store, c store.ReplayClaim) store.ClaimResult {
	t.Helper()
	c.Limit, c.MaxReplays = 100, 5
	c.Lease = max(c.Lease, time.Minute)
	res, err := st.ClaimReplayBatch(context.Background(), c)
	require.NoError(t, err)
	return res
}

// An unknown outcome that the task sends again leaves the message pending
// with the reason and its item unsettled, its unknown count raised; the
// next claim takes it again, with that count, and with the same replay
// count (the same replay attempt). Its outcome is recorded only under that
// count: a settlement of an earlier publish of it changes nothing. Each
// outcome of a publish sent again counts as republished.
func TestReplayRetryOutcomeSendsItAgain(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 1)
	ctx := context.Background()
	id := ids[0]
	task := retryTask(t, st, db, "orders", 2)

	for attempt := 0; attempt < 2; attempt++ {
		tok := fmt.Sprintf("tok%d", attempt)
		res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: tok})
		require.Len(t, res.Messages, 1)
		require.Equal(t, attempt, res.Messages[0].Unknowns)
		require.Equal(t, int64(0), res.Messages[0].ReplayCount, "sent again, it is the same replay")
		s, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: id, Token: tok, Result: store.OutcomeRetry,
			Error: "outcome unknown: connection closed", Attempt: attempt, CopyReplayCount: 1}}, false)
		require.NoError(t, err)
		require.Equal(t, int64(1), s.Retried)
		require.Equal(t, int64(min(attempt, 1)), s.Republished)
		require.Equal(t, int64(1), s.Marked)
		require.Equal(t, 1, count(t, db, "id = $1 AND status = 'pending' AND last_replay_error = 'outcome unknown: connection closed' AND replay_count = 0", id))
		it := itemOf(t, db, task.ID, id)
		require.Nil(t, it.outcome, "unsettled: to be sent again")
		require.Equal(t, attempt+1, *it.unknowns)
		require.Equal(t, int64(1), *it.copyCount)
	}
	got, err := st.GetReplayTask(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Republished)
	require.Zero(t, got.Claimed, "claimed again next time")
	require.Equal(t, int64(1), got.Remaining())

	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok3"})
	require.Len(t, res.Messages, 1)
	require.Equal(t, 2, res.Messages[0].Unknowns)
	// A late outcome of the first publish (its claim long gone) is fenced
	// twice: by its token on the row, by its count on the item.
	s, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: id, Token: "tok3", Result: store.OutcomePublished, Attempt: 0}}, false)
	require.NoError(t, err)
	require.Zero(t, s.Published, "an outcome of an earlier publish")
	s, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: id, Token: "tok3", Result: store.OutcomePublished, Attempt: 2}}, false)
	require.NoError(t, err)
	require.Equal(t, int64(1), s.Published)
	require.Equal(t, int64(1), s.Republished)
	got, err = st.GetReplayTask(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Published)
	require.Equal(t, int64(2), got.Republished)
	require.Zero(t, got.Unknown)
	require.Zero(t, got.Remaining())
	require.Equal(t, 1, count(t, db, "id = $1 AND status = 'replayed' AND replay_count = 1 AND last_replay_error IS NULL", id))
	requireCountersConsistent(t, db)
}

// A claim taken back after its lease: a row its holder may have published
// waits to be sent again while its task has retries left for it, and is
// settled as unknown once they are spent. The former holder's outcomes
// change nothing.
func TestReplayRecoveryRetriesWithinTheBound(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 3)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 1)
	expire := func(token string) {
		t.Helper()
		_, err := db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 second' WHERE token = $1`, token)
		require.NoError(t, err)
		_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 second' WHERE claim_owner = $1`, token)
		require.NoError(t, err)
	}

	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "a"})
	require.Len(t, res.Messages, 3)
	// Announced the first two, then died.
	require.NoError(t, st.MarkReplayClaim(ctx, task.ID, "a", ids[1]))
	expire("a")
	got, err := st.RecoverExpiredReplayClaims(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, store.RecoveredClaims{Taken: 3, Retried: 2}, got)
	require.Equal(t, 2, count(t, db, "status = 'pending' AND last_replay_error = $1", store.UnknownOutcomeLeaseExpired))
	for _, id := range ids[:2] {
		it := itemOf(t, db, task.ID, id)
		require.Nil(t, it.outcome)
		require.Equal(t, 1, *it.unknowns)
		require.Equal(t, int64(1), *it.copyCount, "its copies carried replay count 1")
	}
	// The former holder's confirm comes late: nothing changes.
	s, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[0], Token: "a", Result: store.OutcomePublished}}, false)
	require.NoError(t, err)
	require.Zero(t, s.Published+s.Marked)

	// The task resumes: all three again, two of them sent again.
	res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "b", MarkFirst: 32})
	require.Len(t, res.Messages, 3)
	require.Equal(t, []int{1, 1, 0}, []int{res.Messages[0].Unknowns, res.Messages[1].Unknowns, res.Messages[2].Unknowns})
	expire("b")
	got, err = st.RecoverExpiredReplayClaims(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, store.RecoveredClaims{Taken: 3, Unknown: 2, Retried: 1, Republished: 2}, got, "the retry spent: unknown")
	task2, err := st.GetReplayTask(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), task2.Unknown)
	require.Equal(t, int64(2), task2.Republished)
	require.Equal(t, int64(1), task2.Remaining())
	require.Equal(t, 2, count(t, db, "id = ANY($1) AND status = 'pending' AND last_replay_error = $2", ids[:2], store.UnknownOutcomeLeaseExpired))
	requireCountersConsistent(t, db)
}

// A copy sent before an unknown outcome died and came back to its row
// (the consumer raised replay_count to the copy's) before the task sent it
// again: the task does not send it again. Its item is published (the copy
// was delivered), with the replay id it died with, which a canary knows as
// its own; the row keeps its new death and loses the unknown outcome's
// error.
func TestReplayClaimLeavesACopyThatCameBack(t *testing.T) {
	t.Parallel()
	for _, canary := range []bool{false, true} {
		t.Run(map[bool]string{false: "task", true: "canary"}[canary], func(t *testing.T) {
			t.Parallel()
			st, db, ids := seededStore(t, 2)
			ctx := context.Background()
			task := retryTask(t, st, db, "orders", 3)
			res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok", Canary: canary})
			require.Len(t, res.Messages, 2)
			outs := make([]store.ReplayOutcome, len(ids))
			for i, id := range ids {
				outs[i] = store.ReplayOutcome{ID: id, Token: "tok", Result: store.OutcomeRetry, Error: "outcome unknown: lost",
					CopyReplayCount: 1, ReplayID: "rid-" + string(rune('a'+i))}
			}
			_, err := st.SettleReplayOutcomes(ctx, task.ID, outs, canary)
			require.NoError(t, err)

			// The first's copy was delivered, and died.
			back := msg("orders", "body 0", 999)
			back.DLQID, back.ReplayID, back.ReplayCount, back.Redelivered = ids[0], "rid-a", 1, false
			back.Reason = "expired"
			_, r := ingest(t, st, back)
			require.Equal(t, 1, r.Returned)

			res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok2", Canary: canary})
			require.Len(t, res.Messages, 1, "only the other one is sent again")
			require.Equal(t, ids[1], res.Messages[0].ID)
			require.Equal(t, 1, res.Returned)
			it := itemOf(t, db, task.ID, ids[0])
			require.Equal(t, store.OutcomePublished, *it.outcome)
			require.Equal(t, "rid-a", *it.detail)
			st0 := rowState(t, db, ids[0])
			require.Equal(t, "pending", st0.status)
			require.Equal(t, "expired", st0.reason)
			require.Equal(t, 1, st0.replayCount)
			require.Equal(t, 1, count(t, db, "id = $1 AND last_replay_error IS NULL", ids[0]))
			got, err := st.GetReplayTask(ctx, task.ID)
			require.NoError(t, err)
			require.Equal(t, int64(1), got.Published)
			dead, err := st.CanaryDiedAgain(ctx, task.ID)
			require.NoError(t, err)
			if canary {
				require.Equal(t, []int64{ids[0]}, got.CanaryIDs)
				require.Equal(t, []int64{ids[0]}, dead, "the canary's own copy died")
			} else {
				require.Empty(t, got.CanaryIDs)
				require.Empty(t, dead)
			}

			// The other one's second copy is confirmed; then its first copy
			// dies: the canary knows it by either replay id.
			_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[1], Token: "tok2",
				Result: store.OutcomePublished, Attempt: 1, ReplayID: "rid-b2"}}, canary)
			require.NoError(t, err)
			if canary {
				require.Equal(t, "rid-b rid-b2", *itemOf(t, db, task.ID, ids[1]).detail)
			}
			back = msg("orders", "body 1", 998)
			back.DLQID, back.ReplayID, back.ReplayCount = ids[1], "rid-b", 1
			_, r = ingest(t, st, back)
			require.Equal(t, 1, r.Returned)
			dead, err = st.CanaryDiedAgain(ctx, task.ID)
			require.NoError(t, err)
			if canary {
				require.Equal(t, ids, dead)
			}
			requireCountersConsistent(t, db)
		})
	}
}

// A task stopped before it sent again what waited for it settles those
// messages as unknown: all but the one its own last claim is sending
// again, and only once it is finished.
func TestReplaySettleStoppedRetries(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 3)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 3)
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok"})
	require.Len(t, res.Messages, 3)
	_, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
		{ID: ids[0], Token: "tok", Result: store.OutcomeRetry, Error: "outcome unknown: lost", CopyReplayCount: 1},
		{ID: ids[1], Token: "tok", Result: store.OutcomeRetry, Error: "outcome unknown: lost", CopyReplayCount: 1},
		{ID: ids[2], Token: "tok", Result: store.OutcomePublished},
	}, false)
	require.NoError(t, err)
	requireTaskAddsUp(t, st, db, task.ID, "two wait to be sent again")
	n, err := st.SettleStoppedRetries(ctx, task.ID)
	require.NoError(t, err)
	require.Zero(t, n, "a running task sends them again")
	// One is being sent again as the task is cancelled.
	res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok2", IDs: ids[1:2]})
	require.Len(t, res.Messages, 1)
	_, err = st.CancelReplayTask(ctx, task.ID, replayActor, nil)
	require.NoError(t, err)
	n, err = st.SettleStoppedRetries(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the one being sent is its holder's to settle")
	requireTaskAddsUp(t, st, db, task.ID, "the stopped task settled one as unknown")
	require.Equal(t, store.UnknownOutcomeNotSentAgain, *itemOf(t, db, task.ID, ids[0]).detail)
	got, err := st.GetReplayTask(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Unknown)
	require.Equal(t, int64(1), got.Published)
	require.Equal(t, int64(1), got.Remaining())
	n, err = st.SettleStoppedRetries(ctx, task.ID)
	require.NoError(t, err)
	require.Zero(t, n, "once")
	requireTaskAddsUp(t, st, db, task.ID, "settled once")
	requireCountersConsistent(t, db)
}

// A task stopped while messages waited to be sent again settles each as
// unknown whatever became of the message since: acknowledged, deleted
// (its item stays: items have no foreign key to messages), replayed by
// another task, or being replayed by one. The copy it sent may have been
// delivered, and the task will never send it again. Only pending ones
// were settled: the others stayed in remaining for ever, and the counters
// never reached requested. The one its own last claim is sending again
// is that claim's to settle.
func TestReplaySettleStoppedRetriesWhateverBecameOfTheMessage(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 6)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 3)
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok"})
	require.Len(t, res.Messages, len(ids))
	outs := make([]store.ReplayOutcome, len(ids))
	for i, id := range ids {
		outs[i] = store.ReplayOutcome{ID: id, Token: "tok", Result: store.OutcomeRetry, Error: "outcome unknown: lost", CopyReplayCount: 1}
	}
	_, err := st.SettleReplayOutcomes(ctx, task.ID, outs, false)
	require.NoError(t, err)

	// ids[0] stays pending.
	_, err = st.Acknowledge(ctx, store.Filter{IDs: ids[1:2], Status: "all"}, replayActor, store.ActionOptions{Confirm: true})
	require.NoError(t, err)
	require.NoError(t, st.DeleteMessage(ctx, ids[2], replayActor))
	other := newTask(t, st, store.Filter{IDs: ids[3:5]})
	res = claimAll(t, st, store.ReplayClaim{TaskID: other.ID, Token: "other", IDs: ids[3:5]})
	require.Len(t, res.Messages, 2)
	_, err = st.SettleReplayOutcomes(ctx, other.ID, []store.ReplayOutcome{{ID: ids[3], Token: "other", Result: store.OutcomePublished}}, false)
	require.NoError(t, err)
	// ids[4] is being replayed by the other task; ids[5] by this one.
	res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "again", IDs: ids[5:]})
	require.Len(t, res.Messages, 1)
	require.Equal(t, []int{1, 1, 1, 1, 2}, []int{
		count(t, db, "id = $1 AND status = 'pending'", ids[0]), count(t, db, "id = $1 AND status = 'acknowledged'", ids[1]),
		1 - count(t, db, "id = $1", ids[2]), count(t, db, "id = $1 AND status = 'replayed'", ids[3]),
		count(t, db, "id = ANY($1) AND status = 'replaying'", ids[4:])})

	_, err = st.CancelReplayTask(ctx, task.ID, replayActor, nil)
	require.NoError(t, err)
	n, err := st.SettleStoppedRetries(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, int64(5), n, "all but the one its own claim is sending again")
	for _, id := range ids[:5] {
		it := itemOf(t, db, task.ID, id)
		require.Equal(t, store.OutcomeUnknown, *it.outcome, "message %d", id)
		require.Equal(t, store.UnknownOutcomeNotSentAgain, *it.detail, "message %d", id)
	}
	require.Nil(t, itemOf(t, db, task.ID, ids[5]).outcome)
	got := requireTaskAddsUp(t, st, db, task.ID, "settled but the one being sent")
	require.Equal(t, int64(5), got.Unknown)
	require.Equal(t, int64(1), got.Remaining())
	n, err = st.SettleStoppedRetries(ctx, task.ID)
	require.NoError(t, err)
	require.Zero(t, n, "once")

	// The last claim's outcome settles the last one.
	_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[5], Token: "again", Result: store.OutcomeUnknown,
		Error: "outcome unknown: lost", Attempt: 1}}, false)
	require.NoError(t, err)
	got = requireTaskAddsUp(t, st, db, task.ID, "all settled")
	require.Equal(t, int64(6), got.Unknown)
	require.Zero(t, got.Remaining())
	requireTaskAddsUp(t, st, db, other.ID, "the other task")
	requireCountersConsistent(t, db)
}

// A stopped task's claim taken back after its lease: a row it was sending
// again, above the claim's write-ahead mark (so not sent again yet), is
// unknown now, as SettleStoppedRetries would have settled it had the
// claim not held it. Recovery handed it back to the stopped task, which
// never settled it: it stayed in remaining for ever.
func TestReplayRecoverySettlesAStoppedTasksRetries(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 3)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 3)
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok", IDs: ids[:2]})
	require.Len(t, res.Messages, 2)
	_, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
		{ID: ids[0], Token: "tok", Result: store.OutcomeRetry, Error: "outcome unknown: lost", CopyReplayCount: 1},
		{ID: ids[1], Token: "tok", Result: store.OutcomeRetry, Error: "outcome unknown: lost", CopyReplayCount: 1},
	}, false)
	require.NoError(t, err)
	// Claimed again, with a message never tried, and nothing marked yet;
	// the task is cancelled, and its runner dies.
	res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "again", IDs: ids})
	require.Len(t, res.Messages, 3)
	_, err = st.CancelReplayTask(ctx, task.ID, replayActor, nil)
	require.NoError(t, err)
	n, err := st.SettleStoppedRetries(ctx, task.ID)
	require.NoError(t, err)
	require.Zero(t, n, "its claim holds them")
	_, err = db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 second' WHERE token = 'again'`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 second' WHERE claim_owner = 'again'`)
	require.NoError(t, err)

	got, err := st.RecoverExpiredReplayClaims(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, store.RecoveredClaims{Taken: 3, Unknown: 2}, got)
	for _, id := range ids[:2] {
		it := itemOf(t, db, task.ID, id)
		require.Equal(t, store.OutcomeUnknown, *it.outcome)
		require.Equal(t, store.UnknownOutcomeNotSentAgain, *it.detail)
		require.Equal(t, 1, *it.unknowns, "not sent again")
	}
	require.Nil(t, itemOf(t, db, task.ID, ids[2]).outcome, "never tried: remaining")
	task2 := requireTaskAddsUp(t, st, db, task.ID, "after recovery")
	require.Equal(t, int64(2), task2.Unknown)
	require.Zero(t, task2.Republished)
	require.Equal(t, int64(1), task2.Remaining())
	require.Equal(t, 3, count(t, db, "status = 'pending'"))
	requireCountersConsistent(t, db)
}

// A message to be sent again waits after its unknown outcome: retryAfter,
// doubled for each further one, before the task's next items include it.
func TestReplayItemsAfterWaitsToSendAgain(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 2)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 3)
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok", IDs: ids[:1]})
	require.Len(t, res.Messages, 1)
	_, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[0], Token: "tok", Result: store.OutcomeRetry,
		Error: "outcome unknown: lost", CopyReplayCount: 1}}, false)
	require.NoError(t, err)
	next := func(after time.Duration) []int64 {
		t.Helper()
		got, _, err := st.ReplayItemsAfter(ctx, task.ID, 0, 10, 0, after)
		require.NoError(t, err)
		return got
	}
	require.Equal(t, ids[1:], next(time.Hour), "just settled: it waits")
	require.Equal(t, ids, next(0), "no wait asked")
	_, err = db.Exec(ctx, `UPDATE dead_messages SET last_replay_at = now() - interval '3 seconds' WHERE id = $1`, ids[0])
	require.NoError(t, err)
	require.Equal(t, ids, next(2*time.Second), "one unknown outcome: 2 s")
	_, err = db.Exec(ctx, `UPDATE replay_task_items SET unknown_count = 2 WHERE message_id = $1`, ids[0])
	require.NoError(t, err)
	require.Equal(t, ids[1:], next(2*time.Second), "two: 4 s")
}

// Only the items that wait to be sent again, for a canary's messages:
// ReplayRetriesAfter passes the others over, and ReplayAttempts counts
// them apart from those settled unknown.
func TestReplayRetriesAfterOnlyWaiting(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 3)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 3)
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok", IDs: ids[1:2]})
	require.Len(t, res.Messages, 1)
	_, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[1], Token: "tok", Result: store.OutcomeRetry,
		Error: "outcome unknown: lost", CopyReplayCount: 1}}, false)
	require.NoError(t, err)

	got, more, err := st.ReplayRetriesAfter(ctx, task.ID, 0, 10, 0, 0)
	require.NoError(t, err)
	require.Equal(t, ids[1:2], got)
	require.False(t, more)
	got, _, err = st.ReplayRetriesAfter(ctx, task.ID, 0, 10, 0, time.Hour)
	require.NoError(t, err)
	require.Empty(t, got, "it waits after its unknown outcome, as for ReplayItemsAfter")
	a, err := st.ReplayAttempts(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, store.ReplayAttempts{Waiting: 1}, a)
	require.Equal(t, int64(1), a.Tried())

	res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok2", IDs: ids[1:2]})
	require.Len(t, res.Messages, 1)
	_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[1], Token: "tok2", Result: store.OutcomeUnknown,
		Error: "outcome unknown: lost", Attempt: 1}}, false)
	require.NoError(t, err)
	a, err = st.ReplayAttempts(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, store.ReplayAttempts{Unknown: 1}, a)
	got, _, err = st.ReplayRetriesAfter(ctx, task.ID, 0, 10, 0, 0)
	require.NoError(t, err)
	require.Empty(t, got)
}

// A copy to be sent again that was refused before it was published
// (NotSent: its exchange missing, say) fails the item, and is not counted
// as republished: nothing was sent again.
func TestReplaySettleNotSentIsNotRepublished(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 1)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 3)
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok", IDs: ids})
	require.Len(t, res.Messages, 1)
	_, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[0], Token: "tok", Result: store.OutcomeRetry,
		Error: "outcome unknown: lost", CopyReplayCount: 1}}, false)
	require.NoError(t, err)

	res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok2", IDs: ids})
	require.Len(t, res.Messages, 1)
	require.Equal(t, 1, res.Messages[0].Unknowns)
	s, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[0], Token: "tok2", Result: store.OutcomeFailed,
		Error: `exchange "x" does not exist`, Attempt: 1, NotSent: true}}, false)
	require.NoError(t, err)
	require.Equal(t, int64(1), s.Failed)
	require.Zero(t, s.Republished, "never sent")
	after, err := st.GetReplayTask(ctx, task.ID)
	require.NoError(t, err)
	require.Zero(t, after.Republished)
	require.Equal(t, int64(1), after.Failed)
	requireTaskAddsUp(t, st, db, task.ID, "failed once")
	requireCountersConsistent(t, db)
}
