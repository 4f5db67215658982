package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
)

// The canary is the first messages tried, whatever becomes of them: when
// they cannot be published (unroutable here), the task stops after them,
// says why, and leaves the rest pending and untouched.
func TestReplayCanaryStopsWhenItsPublishesFail(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer = true })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 30)
	task, err := b.svc.Start(context.Background(), replay.Request{
		IDs: ids, Canary: &replay.Canary{Count: 2, WaitSeconds: 1},
		Target: &replay.Target{Exchange: "", RoutingKey: dlqtest.Name(t, "nowhere")},
	}, operator)
	require.NoError(t, err)
	final := b.waitTask(t, task.ID, 30*time.Second, replay.StatusCanaryFailed, replay.StatusCompleted)
	require.Equal(t, replay.StatusCanaryFailed, final.Status, "%+v", final)
	require.Equal(t, int64(2), final.Failed)
	require.Zero(t, final.Published+final.Unknown+final.Skipped)
	require.Equal(t, int64(28), final.Remaining)
	require.Equal(t, replay.OutcomeNonePublished, final.Outcome)
	require.Contains(t, final.Error, "none of the first 2 messages could be published (2 failed, 0 unknown)")
	require.Contains(t, final.Error, "the other 28 messages were not touched")
	require.Equal(t, 2, b.count(t, "id = ANY($1) AND status = 'pending' AND last_replay_error LIKE 'unroutable%'", ids))
	require.Equal(t, 28, b.count(t, "id = ANY($1) AND status = 'pending' AND last_replay_at IS NULL", ids))
	var unsettled int
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT count(*) FROM replay_task_items WHERE task_id = $1 AND outcome IS NULL`, task.ID).Scan(&unsettled))
	require.Equal(t, 28, unsettled)
	require.Zero(t, dlqtest.QueueDepth(t, b.app, q))
}
