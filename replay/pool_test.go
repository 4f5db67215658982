package replay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	oplayer "github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// A replay task needs several database connections at once (claims,
// settlements, marks, lease renewals), but never holds one while waiting
// for another: with the smallest pool there is (one connection), shared
// with ingest and the control queue, the task completes, dead messages keep
// being stored, and commands are answered. A smaller pool only makes them
// take turns.
func TestReplayCompletesWithTheSmallestPool(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService = true, true })
	q := b.targetQueue(t)
	const n = 1000
	b.seed(t, q, n)
	ctx := context.Background()

	one, err := store.Open(ctx, store.Config{DatabaseURL: b.dsn, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(one.Close)
	cons, err := consumer.New(consumer.Config{
		Conn: b.conn, Store: one, Exchange: b.exchange, Queues: []string{b.queue},
		Consumers: 1, Prefetch: 200, BatchSize: 100, Linger: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	runCtx, runCancel := context.WithCancel(ctx)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		_ = cons.Run(runCtx)
	}()
	t.Cleanup(func() { runCancel(); <-consumed })
	svc, err := replay.New(replay.Config{Store: one, Conn: b.conn, Lease: 3 * time.Second, BatchSize: 100,
		PollInterval: 50 * time.Millisecond, ShutdownTimeout: 10 * time.Second})
	require.NoError(t, err)
	b.svc = svc
	b.run(t, svc)
	queue := b.controlWith(t, func(c *control.Config, o *oplayer.Config) { o.Replays, o.Store, c.Commands = svc, one, one })
	ops := b.client(t, queue, operatorToken)

	task := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"small-pool","filter":{"source_queue":%q},"confirm":true}`, q)))
	// Ingest goes on meanwhile, on the same single connection.
	src := b.sourceQueue(t, nil)
	for i := range 20 {
		b.publish(t, "", src, amqp.Publishing{Body: []byte(fmt.Sprintf("during the replay %d", i))})
	}
	b.rejectAll(t, src, 20)
	requireOK(t, call(t, ops, `{"command":"list_replays","command_id":"while-replaying"}`))

	final := b.waitTask(t, task.ID, 60*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(n), final.Published)
	b.waitRows(t, 20, "source_queue = $1", src)
	require.Equal(t, n, dlqtest.QueueDepth(t, b.app, q))
	b.requireSummaryExact(t)
}
