package replay_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The canary stops a task only when its own publishes die again. Another
// copy of a canary message dying during the wait — an earlier replay of it
// whose outcome was unknown, carrying the same x-dlq-id but another
// x-dlq-replay-id — brings the record back to pending, but is not the
// canary dying: the task goes on.
func TestReplayCanaryIgnoresAnotherCopysDeath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src, ids := b.deadLetter(t, 3)
	ctx := context.Background()
	task, err := b.svc.Start(ctx, replay.Request{
		Filter: &store.Filter{SourceQueue: src}, Canary: &replay.Canary{Count: 1, WaitSeconds: 6},
	}, operator)
	require.NoError(t, err)
	b.waitTask(t, task.ID, 10*time.Second, replay.StatusCanaryWait)

	// The earlier copy arrives in the source queue and the application
	// rejects it; the canary's own copy is processed fine.
	b.publish(t, "", src, amqp.Publishing{Body: []byte("message 0"), MessageId: "0", Headers: amqp.Table{
		broker.HeaderID: ids[0], broker.HeaderReplayCount: int64(1), broker.HeaderReplayID: "an-earlier-replay",
	}})
	ch := dlqtest.Channel(t, b.app)
	tag := dlqtest.Name(t, "app")
	ds, err := ch.Consume(src, tag, false, false, false, false, nil)
	require.NoError(t, err)
	for range 2 {
		select {
		case d := <-ds:
			if d.Headers[broker.HeaderReplayID] == "an-earlier-replay" {
				require.NoError(t, d.Reject(false))
			} else {
				require.NoError(t, d.Ack(false))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the canary and the earlier copy did not both arrive")
		}
	}
	require.NoError(t, ch.Cancel(tag, false))
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "id = $1 AND status = 'pending' AND last_death_replay_id = 'an-earlier-replay'", ids[0]) == 1
	}, "the earlier copy's death did not come back to its record")
	now, err := b.svc.Get(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, replay.StatusCanaryWait, now.Status, "the death arrived within the canary's wait")

	final := b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted, replay.StatusCanaryFailed)
	require.Equal(t, replay.StatusCompleted, final.Status, final.Error)
	require.Equal(t, int64(3), final.Published)
	require.Equal(t, []int64{ids[0]}, final.CanaryIDs)
}
