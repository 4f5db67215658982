package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// A running task whose messages wait to be sent again after an unknown
// outcome (their runner died after marking them; recovery took them back
// as maybe published), one of which an operator acknowledges and another
// deletes before the task sends them again: both are unknown, not
// skipped, each with a detail that says what came first, for the copy
// sent first may have been delivered; the third is sent again and
// published. The task's counters and dlq_replays_total agree. They were
// skipped, and the task said nothing of them may have arrived.
func TestReplayWaitingMessageGoneIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService = true, true })
	ctx := context.Background()
	q := b.targetQueue(t)
	ids := b.seed(t, q, 3)
	task, err := b.svc.Start(ctx, replay.Request{IDs: ids}, operator)
	require.NoError(t, err)

	const holder = "a runner that died"
	_, ok, err := b.st.AcquireReplayTask(ctx, holder, time.Minute, nil)
	require.NoError(t, err)
	require.True(t, ok)
	claim, err := b.st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: holder, Lease: 100 * time.Millisecond,
		IDs: ids, MaxReplays: 5, MarkFirst: len(ids)})
	require.NoError(t, err)
	require.Len(t, claim.Messages, len(ids))
	var retried int64
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		got, err := b.st.RecoverExpiredReplayClaims(ctx, 100)
		require.NoError(t, err)
		retried += got.Retried
		return retried == int64(len(ids))
	}, "the claim was not taken back")
	require.NoError(t, b.st.ReleaseReplayTask(ctx, task.ID, holder))
	require.Equal(t, len(ids), b.waitingItems(t, task.ID))

	_, err = b.st.Acknowledge(ctx, store.Filter{IDs: ids[:1]}, operator, store.ActionOptions{Confirm: true})
	require.NoError(t, err)
	_, err = b.st.Delete(ctx, store.Filter{IDs: ids[1:2]}, operator, store.ActionOptions{Confirm: true})
	require.NoError(t, err)

	b.run(t, b.svc)
	final := b.waitTask(t, task.ID, 30*time.Second, replay.StatusCompleted)
	t.Logf("%+v", final)
	require.Equal(t, int64(2), final.Unknown, "acknowledged and deleted while they waited to be sent again")
	require.Equal(t, int64(1), final.Published)
	require.Zero(t, final.Skipped+final.Failed+final.Remaining)
	require.Empty(t, final.SkipReasons)
	require.Equal(t, replay.OutcomePartial, final.Outcome)
	require.Equal(t, 2.0, replaysTotal(t, b.reg, "unknown"))
	require.Zero(t, replaysTotal(t, b.reg, "skipped"))
	for id, want := range map[int64]string{
		ids[0]: "outcome unknown: the message was acknowledged before the task could send it again; it may have been delivered",
		ids[1]: store.UnknownOutcomeDeleted,
	} {
		var outcome, detail string
		require.NoError(t, b.db.QueryRow(ctx, `SELECT outcome, detail FROM replay_task_items WHERE task_id = $1 AND message_id = $2`,
			task.ID, id).Scan(&outcome, &detail))
		require.Equal(t, []string{store.OutcomeUnknown, want}, []string{outcome, detail}, "message %d", id)
	}
	copies := byID(t, b.consume(t, q, 1, 20*time.Second))
	require.Len(t, copies, 1, "the pending one was sent again")
	b.requireSummaryExact(t)
}
