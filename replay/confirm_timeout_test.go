//go:build !faults

// This file runs in the normal suite: it suspends only its own queue's
// process, not a shared server. It is left out of the fault pass (-tags
// faults -run Fault) so that its TestFault names do not make it run twice.

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
// with on_unknown hold, every publish ends unknown. Nothing is marked
// replayed, the rows are pending again with last_replay_error "outcome
// unknown: …", the task counts them unknown (and publishes none of them
// twice), and once the queue runs again nothing is lost: the messages the
// broker held arrive, once each, and the rows can be replayed again — a
// second copy that shares (x-dlq-id, x-dlq-replay-count) with the first,
// as docs/REPLAY.md says.
func TestFaultConfirmTimeoutUnknown(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.confirmTimeout, o.onUnknown = true, timeout, replay.OnUnknownHold })
	q, resume := b.suspendedQueue(t)
	const n = 20
	ids := b.seed(t, q, n)

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
	resume()
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

// The same withheld confirms with on_unknown retry (the default): the
// task sends each message again after its confirm timeout, and once the
// queue runs again, within the retries, it completes with every message
// replayed and none unknown. Every message arrives twice or more (the
// broker held each copy), at most once plus once per unknown outcome, all
// copies with the same (x-dlq-id, x-dlq-replay-count) and each with its
// own x-dlq-replay-id.
func TestFaultConfirmTimeoutSentAgain(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	// The most retries: the queue must run again before they run out, and
	// with the default three that left the test two seconds between seeing
	// the first resend and resuming the queue, which a loaded machine missed.
	const retries = replay.MaxUnknownRetries
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.confirmTimeout, o.unknownRetries = true, timeout, retries })
	q, resume := b.suspendedQueue(t)
	const n = 20
	ids := b.seed(t, q, n)
	task, err := b.svc.Start(context.Background(), replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	// The first sends time out, and the task sends them again.
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		got, err := b.svc.Get(context.Background(), task.ID)
		require.NoError(t, err)
		return got.Republished >= n
	}, "nothing was sent again")
	resume()
	final := b.waitTask(t, task.ID, 60*time.Second, replay.StatusCompleted)
	t.Logf("%+v", final)
	require.Equal(t, int64(n), final.Published)
	require.Zero(t, final.Unknown+final.Failed)
	require.Equal(t, n, b.count(t, "status = 'replayed' AND replay_count = 1 AND last_replay_error IS NULL"))
	var sent int64
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT sum(unknown_count) FROM replay_task_items WHERE task_id = $1`, task.ID).Scan(&sent))
	require.Equal(t, final.Republished, sent)
	copies := map[int64][]amqp.Delivery{}
	for _, d := range b.consume(t, q, dlqtest.QueueDepth(t, b.app, q), 30*time.Second) {
		id := d.Headers[broker.HeaderID].(int64)
		copies[id] = append(copies[id], d)
	}
	require.Len(t, copies, n)
	for id, cs := range copies {
		require.GreaterOrEqual(t, len(cs), 2, "message %d: the broker held its first copy", id)
		require.LessOrEqual(t, len(cs), 1+retries, "message %d", id)
		seen := map[string]bool{}
		for _, d := range cs {
			require.Equal(t, int64(1), d.Headers[broker.HeaderReplayCount])
			rid := d.Headers[broker.HeaderReplayID].(string)
			require.False(t, seen[rid])
			seen[rid] = true
		}
	}
	b.requireSummaryExact(t)
}
