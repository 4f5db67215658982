package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// A task says why it skipped messages: the loop guard, a message no longer
// pending, a message deleted before its turn. The breakdown is in the task
// JSON wherever a task is answered: Get, the control queue's replay_status
// and list_replays, and a dry run.
func TestReplaySkipReasons(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService = true, true })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 5)
	ctx := context.Background()
	_, err := b.db.Exec(ctx, `UPDATE dead_messages SET replay_count = 5 WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = b.st.Acknowledge(ctx, store.Filter{IDs: ids[1:2]}, operator, store.ActionOptions{})
	require.NoError(t, err)

	dry, err := b.svc.Start(ctx, replay.Request{IDs: ids, DryRun: true}, operator)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{store.SkipMaxReplays: 1, store.SkipNotPending: 1}, dry.SkipReasons)

	task, err := b.svc.Start(ctx, replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	require.Nil(t, task.SkipReasons, "nothing skipped yet")
	_, err = b.st.Delete(ctx, store.Filter{IDs: ids[2:3]}, operator, store.ActionOptions{})
	require.NoError(t, err)
	b.run(t, b.svc)

	final := b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(2), final.Published)
	require.Equal(t, int64(3), final.Skipped)
	want := map[string]int64{store.SkipMaxReplays: 1, store.SkipNotPending: 1, store.SkipDeleted: 1}
	require.Equal(t, want, final.SkipReasons)

	queue := b.control(t)
	viewer := b.client(t, queue, viewerToken)
	status := taskOf(t, call(t, viewer, fmt.Sprintf(`{"command":"replay_status","command_id":"st","id":%d}`, task.ID)))
	require.Equal(t, want, status.SkipReasons)
	a := call(t, viewer, `{"command":"list_replays","command_id":"ls"}`)
	requireOK(t, a)
	var raw struct {
		Replays []map[string]json.RawMessage `json:"replays"`
	}
	require.NoError(t, json.Unmarshal(a.Result, &raw))
	require.Len(t, raw.Replays, 1)
	require.JSONEq(t, `{"max_replays":1,"not_pending":1,"deleted":1}`, string(raw.Replays[0]["skip_reasons"]))

	// Force lifts the loop guard only: a replayed message is still skipped.
	other, err := b.svc.Start(ctx, replay.Request{IDs: ids[3:4], Force: true}, operator)
	require.NoError(t, err)
	final = b.waitTask(t, other.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(1), final.Skipped, "replayed by the first task")
	require.Equal(t, map[string]int64{store.SkipNotPending: 1}, final.SkipReasons)
}
