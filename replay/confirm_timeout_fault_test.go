//go:build faults

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
)

// The broker withholds confirms longer than replay.confirm_timeout (the
// target queue's process is suspended; the connection is not blocked):
// every publish ends unknown. Nothing is marked replayed, the rows are
// pending again with last_replay_error "outcome unknown: …", the task
// counts them unknown (and publishes none of them twice), and once the
// queue runs again nothing is lost: the messages the broker held arrive,
// once each, and the rows can be replayed again — a second copy that
// shares (x-dlq-id, x-dlq-replay-count) with the first, as docs/REPLAY.md
// says.
func TestFaultConfirmTimeoutUnknown(t *testing.T) {
	const timeout = time.Second
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.confirmTimeout = true, timeout })
	q := dlqtest.Name(t, "tgt")
	_, err := b.ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, b.app, q)
	const n = 20
	ids := b.seed(t, q, n)

	require.NoError(t, queueProcess(t, "suspend", q))
	resumed := false
	// Registered after the queue's deletion, so it runs first: a
	// suspended queue would never answer the delete.
	t.Cleanup(func() {
		if !resumed {
			if err := queueProcess(t, "resume", q); err != nil {
				t.Errorf("queue %s left suspended: %v", q, err)
			}
		}
	})

	start := time.Now()
	task, err := b.svc.Start(context.Background(), replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	final := b.waitTask(t, task.ID, 30*time.Second, replay.StatusCompleted)
	took := time.Since(start)
	t.Logf("task ended after %s: %+v", took, final)
	require.GreaterOrEqual(t, took, timeout, "the confirms were not waited for")
	require.False(t, b.conn.Blocked(), "the connection was blocked: this test is about confirms withheld without an alarm")
	require.Equal(t, int64(n), final.Unknown, "every publish ended unknown")
	require.Zero(t, final.Published)
	require.Zero(t, final.Failed)
	require.Zero(t, final.Remaining)

	require.Zero(t, b.count(t, "status = 'replayed'"))
	require.Zero(t, b.count(t, "status = 'replaying'"), "no row is left claimed")
	require.Equal(t, n, b.count(t, "status = 'pending' AND replay_count = 0 AND last_replay_error LIKE 'outcome unknown:%'"))
	var why string
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT last_replay_error FROM dead_messages WHERE id = $1`, ids[0]).Scan(&why))
	t.Logf("last_replay_error: %s", why)
	require.Contains(t, why, "no confirm within the confirm timeout (1s)")
	require.Contains(t, why, "may have been delivered")
	b.requireSummaryExact(t)

	// The condition clears: the queue handles what it was sent. Every
	// message arrives once: the task published each one once and never again.
	require.NoError(t, queueProcess(t, "resume", q))
	resumed = true
	first := map[int64]amqp.Delivery{}
	for _, d := range b.consume(t, q, n, 30*time.Second) {
		id := d.Headers[broker.HeaderID].(int64)
		_, dup := first[id]
		require.False(t, dup, "message %d arrived twice", id)
		first[id] = d
	}
	require.Len(t, first, n)
	require.Zero(t, dlqtest.QueueDepth(t, b.app, q))

	// And the rows are replayable: a second task publishes them all.
	again, err := b.svc.Start(context.Background(), replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	final = b.waitTask(t, again.ID, 30*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(n), final.Published)
	require.Zero(t, final.Unknown+final.Failed+final.Skipped)
	require.Equal(t, n, b.count(t, "status = 'replayed' AND replay_count = 1"))
	for _, d := range b.consume(t, q, n, 30*time.Second) {
		id := d.Headers[broker.HeaderID].(int64)
		f, ok := first[id]
		require.True(t, ok, "message %d was not in the first round", id)
		// The copy a consumer must drop shares the pair; the publish id differs.
		require.Equal(t, f.Headers[broker.HeaderReplayCount], d.Headers[broker.HeaderReplayCount])
		require.NotEqual(t, f.Headers[broker.HeaderReplayID], d.Headers[broker.HeaderReplayID])
	}
	b.requireSummaryExact(t)
}
