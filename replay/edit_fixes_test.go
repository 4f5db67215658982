package replay_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	oplayer "github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// editor is the operator the edit tests act as.
var editor = oplayer.Caller{Principal: auth.Principal{Name: "ops", Role: auth.RoleOperator, Bodies: true}, Via: oplayer.ViaAPI}

// editBody asks for a copy of message id with body.
func editBody(t *testing.T, o *oplayer.Service, id int64, body string) (oplayer.EditResult, error) {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString([]byte(body))
	return o.EditReplay(context.Background(), editor, id, oplayer.EditRequest{BodyBase64: &b64})
}

// The loop guard stops blind repeats of a failing message, not the
// corrected copy an operator chose to send: a message replayed
// max_replays times is still edited and its copy published.
func TestEditReplayPastTheLoopGuard(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.maxReplays = true, 2 })
	q := b.targetQueue(t)
	id := b.seed(t, q, 1)[0]
	_, err := b.db.Exec(context.Background(), `UPDATE dead_messages SET replay_count = 2 WHERE id = $1`, id)
	require.NoError(t, err)
	o := newOps(t, oplayer.Config{Store: b.st, Replays: b.svc})

	res, err := editBody(t, o, id, "fixed")
	require.NoError(t, err)
	task := b.waitTask(t, res.Task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(1), task.Published, "%+v", task)
	require.Zero(t, task.Skipped, "%+v", task.SkipReasons)

	got := b.consume(t, q, 1, 10*time.Second)
	require.Equal(t, "fixed", string(got[0].Body))
	require.EqualValues(t, id, got[0].Headers[replay.HeaderEditedFrom])
	require.Equal(t, res.Copy.ReplayID, got[0].Headers[broker.HeaderReplayID])
	e, ok, err := b.st.GetMessageEdit(context.Background(), id)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.EditSent, e.State)
}

// An edit whose task was cancelled before it published the copy sent
// nothing: the message may be edited again, and only the second copy goes
// out. Cancelled while it waited for a runner, and while a runner held it.
func TestEditReplayCancelledBeforePublishIsRedone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("waiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService = true, true })
		q := b.targetQueue(t)
		id := b.seed(t, q, 1)[0]
		o := newOps(t, oplayer.Config{Store: b.st, Replays: b.svc})

		first, err := editBody(t, o, id, "first")
		require.NoError(t, err)
		_, err = editBody(t, o, id, "again")
		require.ErrorIs(t, err, store.ErrConflict, "one edit at a time")
		_, err = b.svc.Cancel(ctx, first.Task.ID, operator, nil)
		require.NoError(t, err)
		e, _, err := b.st.GetMessageEdit(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.EditFailed, e.State, "nothing was sent")
		require.Contains(t, e.Error, "cancelled by")

		second, err := editBody(t, o, id, "second")
		require.NoError(t, err, "a cancelled edit that sent nothing may be redone")
		b.run(t, b.svc)
		done := b.waitTask(t, second.Task.ID, 20*time.Second, replay.StatusCompleted)
		require.Equal(t, int64(1), done.Published)
		require.Equal(t, "second", string(b.consume(t, q, 1, 10*time.Second)[0].Body))
		cancelled, err := b.svc.Get(ctx, first.Task.ID)
		require.NoError(t, err)
		require.Equal(t, replay.StatusCancelled, cancelled.Status)
		require.Zero(t, cancelled.Published)
	})
	t.Run("running", func(t *testing.T) {
		t.Parallel()
		// A lease longer than the test waits: the message is free again
		// because the stopped runner lets its task go, not because its
		// lease ran out.
		b := setup(t, func(o *setupOpts) { o.noConsumer, o.lease = true, time.Minute })
		q := b.targetQueue(t)
		id := b.seed(t, q, 1)[0]
		o := newOps(t, oplayer.Config{Store: b.st, Replays: b.svc})
		// The row held by another transaction: the runner can claim nothing
		// and waits, holding its task.
		tx, err := b.db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT 1 FROM dead_messages WHERE id = $1 FOR UPDATE`, id)
		require.NoError(t, err)

		first, err := editBody(t, o, id, "first")
		require.NoError(t, err)
		b.waitTask(t, first.Task.ID, 10*time.Second, replay.StatusRunning)
		_, err = b.svc.Cancel(ctx, first.Task.ID, operator, nil)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		var second oplayer.EditResult
		dlqtest.Eventually(t, 10*time.Second, func() bool {
			second, err = editBody(t, o, id, "second")
			return err == nil
		}, "the edit of the cancelled task was never redone")
		done := b.waitTask(t, second.Task.ID, 20*time.Second, replay.StatusCompleted)
		require.Equal(t, int64(1), done.Published)
		require.Equal(t, "second", string(b.consume(t, q, 1, 10*time.Second)[0].Body))
	})
}
