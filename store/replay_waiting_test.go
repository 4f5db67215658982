package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// A running task whose message waited to be sent again after an unknown
// outcome, and was acknowledged, replayed by another task or deleted
// before the task's next claim, settles its item as unknown, with a detail
// that says what happened first: the copy sent before may have been
// delivered, and a skip would say nothing was (the rule
// SettleStoppedRetries follows for a stopped task). A message the task
// never tried is skipped as before, with its skip reason. The counters add
// up after every step.
func TestReplayWaitingItemNoLongerPendingIsUnknown(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 7)
	ctx := context.Background()
	task := retryTask(t, st, db, "orders", 3)
	res := claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "tok", IDs: ids[:4]})
	require.Len(t, res.Messages, 4)
	outs := make([]store.ReplayOutcome, 4)
	for i, id := range ids[:4] {
		outs[i] = store.ReplayOutcome{ID: id, Token: "tok", Result: store.OutcomeRetry, Error: "outcome unknown: lost", CopyReplayCount: 1}
	}
	_, err := st.SettleReplayOutcomes(ctx, task.ID, outs, false)
	require.NoError(t, err)
	requireTaskAddsUp(t, st, db, task.ID, "four wait to be sent again")

	// Waiting: ids[0] acknowledged, ids[1] deleted, ids[2] replayed by
	// another task, ids[3] still pending. Never tried: ids[4]
	// acknowledged, ids[5] deleted, ids[6] pending.
	_, err = st.Acknowledge(ctx, store.Filter{IDs: []int64{ids[0], ids[4]}, Status: "all"}, replayActor, store.ActionOptions{Confirm: true})
	require.NoError(t, err)
	require.NoError(t, st.DeleteMessage(ctx, ids[1], replayActor))
	require.NoError(t, st.DeleteMessage(ctx, ids[5], replayActor))
	other := newTask(t, st, store.Filter{IDs: ids[2:3]})
	res = claimAll(t, st, store.ReplayClaim{TaskID: other.ID, Token: "other", IDs: ids[2:3]})
	require.Len(t, res.Messages, 1)
	_, err = st.SettleReplayOutcomes(ctx, other.ID, []store.ReplayOutcome{{ID: ids[2], Token: "other", Result: store.OutcomePublished}}, false)
	require.NoError(t, err)

	// The running task claims what is left.
	res = claimAll(t, st, store.ReplayClaim{TaskID: task.ID, Token: "again"})
	require.Equal(t, []int64{ids[3], ids[6]}, []int64{res.Messages[0].ID, res.Messages[1].ID})
	require.Equal(t, 1, res.Skipped, "the acknowledged message it never tried")
	require.Equal(t, 2, res.Unknown, "the acknowledged and the replayed messages it was to send again")
	requireTaskAddsUp(t, st, db, task.ID, "claimed again")
	for id, want := range map[int64]string{
		ids[0]: "outcome unknown: the message was acknowledged before the task could send it again; it may have been delivered",
		ids[2]: "outcome unknown: the message was replayed before the task could send it again; it may have been delivered",
	} {
		it := itemOf(t, db, task.ID, id)
		require.Equal(t, store.OutcomeUnknown, *it.outcome, "message %d", id)
		require.Equal(t, want, *it.detail, "message %d", id)
	}
	it := itemOf(t, db, task.ID, ids[4])
	require.Equal(t, store.OutcomeSkipped, *it.outcome)
	require.Equal(t, "status is acknowledged: only pending messages are replayed", *it.detail)

	// The end of a pass settles the items of deleted messages.
	n, err := st.SkipDeletedReplayItems(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, store.SettledDeleted{Skipped: 1, Unknown: 1}, n)
	it = itemOf(t, db, task.ID, ids[1])
	require.Equal(t, store.OutcomeUnknown, *it.outcome)
	require.Equal(t, store.UnknownOutcomeDeleted, *it.detail)
	require.Equal(t, "outcome unknown: the message was deleted before the task could send it again; it may have been delivered", *it.detail)
	it = itemOf(t, db, task.ID, ids[5])
	require.Equal(t, store.OutcomeSkipped, *it.outcome)
	require.Equal(t, store.SkipDeletedDetail, *it.detail)

	_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
		{ID: ids[3], Token: "again", Result: store.OutcomePublished, Attempt: 1},
		{ID: ids[6], Token: "again", Result: store.OutcomePublished},
	}, false)
	require.NoError(t, err)
	got := requireTaskAddsUp(t, st, db, task.ID, "all settled")
	require.Equal(t, []int64{2, 3, 2, 0}, []int64{got.Published, got.Unknown, got.Skipped, got.Remaining()})
	reasons, err := st.ReplaySkipReasons(ctx, []int64{task.ID})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{store.SkipNotPending: 1, store.SkipDeleted: 1}, reasons[task.ID])
	n, err = st.SkipDeletedReplayItems(ctx, task.ID)
	require.NoError(t, err)
	require.Zero(t, n, "once")
	requireTaskAddsUp(t, st, db, other.ID, "the other task")
	requireCountersConsistent(t, db)
}
