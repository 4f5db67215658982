package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	oplayer "github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// A requested id whose message no longer exists, or never did, is counted:
// requested, and skipped as deleted or not_found (never stored: above the
// highest id ever given), in the task and in its dry run, and in
// dlq_replays_total{result="skipped"}. A scoped token is refused such an
// id as not found, exactly like the id of another queue's message.
func TestReplayCountsDeletedIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService = true, true })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 3)
	other := b.seed(t, b.targetQueue(t), 1)
	_, err := b.st.Delete(ctx, store.Filter{IDs: ids[2:]}, operator, store.ActionOptions{})
	require.NoError(t, err)
	never := ids[2] + 1_000_000
	asked := []int64{ids[0], ids[1], ids[2], never, never}
	deleted := map[string]int64{store.SkipDeleted: 1, store.SkipNotFound: 1}

	o := newOps(t, oplayer.Config{Store: b.st, Replays: b.svc})
	dry, err := o.StartReplay(ctx, editor, oplayer.ReplayRequest{Request: replay.Request{IDs: asked, DryRun: true}})
	require.NoError(t, err)
	require.Equal(t, int64(4), dry.Requested)
	require.Equal(t, int64(2), dry.Skipped)
	require.Equal(t, int64(2), dry.Remaining)
	require.Equal(t, deleted, dry.SkipReasons)

	task, err := o.StartReplay(ctx, editor, oplayer.ReplayRequest{Request: replay.Request{IDs: asked}})
	require.NoError(t, err)
	require.Equal(t, int64(4), task.Requested)
	require.Equal(t, int64(2), task.Skipped)
	require.Equal(t, 2.0, replaysTotal(t, b.reg, "skipped"))
	b.run(t, b.svc)
	final := b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(2), final.Published)
	require.Equal(t, deleted, final.SkipReasons)
	require.Equal(t, replay.OutcomeAllPublished, final.Outcome)
	require.Equal(t, 2.0, replaysTotal(t, b.reg, "skipped"), "counted once")

	// A scoped token: an id of no message and an id of another queue are
	// both not found (docs/API.md), so nothing tells them apart.
	scoped := oplayer.Caller{Principal: auth.Principal{Name: "scoped", Role: auth.RoleOperator, Queues: []string{q}, Bodies: true}, Via: oplayer.ViaAPI}
	for _, id := range []int64{ids[2], never, other[0]} {
		for _, dryRun := range []bool{true, false} {
			_, err := o.StartReplay(ctx, scoped, oplayer.ReplayRequest{Request: replay.Request{IDs: []int64{ids[0], id}, DryRun: dryRun}})
			require.ErrorIs(t, err, store.ErrNotFound, "id %d, dry run %v", id, dryRun)
		}
	}
}

// A replay naming only ids that do not exist (never stored, or deleted)
// is not_found, and so is its dry run: the dry run does not promise a task
// the request would refuse.
func TestReplayOnlyMissingIDsDryRunAgrees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService = true, true })
	ids := b.seed(t, b.targetQueue(t), 2)
	_, err := b.st.Delete(ctx, store.Filter{IDs: ids[1:]}, operator, store.ActionOptions{})
	require.NoError(t, err)
	o := newOps(t, oplayer.Config{Store: b.st, Replays: b.svc})
	for _, asked := range [][]int64{{ids[1] + 1_000_000}, {ids[1]}, {ids[1], ids[1] + 1_000_000}} {
		for _, dryRun := range []bool{true, false} {
			_, err := o.StartReplay(ctx, editor, oplayer.ReplayRequest{Request: replay.Request{IDs: asked, DryRun: dryRun}})
			require.ErrorIs(t, err, store.ErrEmptySelection, "ids %v, dry run %v", asked, dryRun)
		}
	}
}

// A message deleted after its task was created is skipped as deleted,
// and counted in dlq_replays_total{result="skipped"}.
func TestReplayDeletedMidTaskCountsAsSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService = true, true })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 3)
	task, err := b.svc.Start(ctx, replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	_, err = b.st.Delete(ctx, store.Filter{IDs: ids[1:2]}, operator, store.ActionOptions{})
	require.NoError(t, err)
	b.run(t, b.svc)
	final := b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, map[string]int64{store.SkipDeleted: 1}, final.SkipReasons)
	skipped := testutil.ToFloat64(mustCollector(t, b.reg, "dlq_replays_total", "result", "skipped"))
	require.Equal(t, 1.0, skipped)
	require.Equal(t, 2.0, replaysTotal(t, b.reg, "published"))
}
