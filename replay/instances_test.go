package replay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	oplayer "github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Two dlq instances on one database: a cancel_replay answered by instance
// B's control-queue consumer stops the task instance A runs, within a
// publish or so, and A hands every claim back.
func TestCancelThroughAnotherInstance(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer = true })
	q := b.targetQueue(t)
	b.seed(t, q, 200)
	ctx := context.Background()

	// Instance B: its own pool, broker connection, replay service and
	// control consumer. Only B consumes the control queue.
	stB, err := store.Open(ctx, store.Config{DatabaseURL: b.dsn, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(stB.Close)
	connB, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "dlq-instance-b"})
	require.NoError(t, err)
	t.Cleanup(connB.Close)
	svcB, err := replay.New(replay.Config{Store: stB, Conn: connB, Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second, Name: "instance-b"})
	require.NoError(t, err)
	queue := b.controlWith(t, func(c *control.Config, o *oplayer.Config) {
		c.Conn, c.Commands, c.Consumers = connB, stB, 1
		o.Replays, o.Store = svcB, stB
	})
	ops := b.client(t, queue, operatorToken)

	// The task starts on A (the bundle's service), the only runner yet.
	task, err := b.svc.Start(ctx, replay.Request{Filter: &store.Filter{SourceQueue: q}, RatePerSecond: 40}, operator)
	require.NoError(t, err)
	running := mustCollectorNoLabel(t, b, "dlq_replay_tasks_running")
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, b.app, q) >= 5 }, "replay did not start on A")
	require.Equal(t, 1.0, running(), "A runs the task")
	b.run(t, svcB) // B runs too from now on; A holds the task.

	cancelled := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"cancel_replay","command_id":"cancel-on-b","id":%d}`, task.ID)))
	require.Equal(t, replay.StatusCancelled, cancelled.Status)
	dlqtest.Eventually(t, 5*time.Second, func() bool { return running() == 0 }, "A's runner did not stop")
	dlqtest.Eventually(t, 10*time.Second, func() bool { return b.count(t, "status = 'replaying'") == 0 }, "claims not handed back")
	final, err := b.svc.Get(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, replay.StatusCancelled, final.Status)
	require.Less(t, final.Published, int64(100), "stopped long before the end (200 at 40/s)")
	require.Equal(t, int(final.Published), b.count(t, "status = 'replayed'"))
	require.Equal(t, int(final.Published), dlqtest.QueueDepth(t, b.app, q))
	require.Equal(t, 200-int(final.Published), b.count(t, "status = 'pending'"))
	b.requireSummaryExact(t)
}

// mustCollectorNoLabel reads a label-less metric of the bundle's registry.
func mustCollectorNoLabel(t *testing.T, b *bundle, name string) func() float64 {
	return func() float64 {
		mfs, err := b.reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) == 1 {
				m := mf.GetMetric()[0]
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
}
