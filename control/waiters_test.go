package control

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestWaitersTakeNothingAfterWait: a handler that outlives the router
// (Router.Run returns after its CloseTimeout while a handler still runs)
// and hands a repeat over after Run's wait for the waiters is turned away,
// and handles the repeat itself. It started a waiter that outlived Run (or,
// racing the wait, made WaitGroup panic).
func TestWaitersTakeNothingAfterWait(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "dlq-control-waiters-test"})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	queue := dlqtest.Name(t, "ctl_waiters")
	_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, queue)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte(`{}`)}))

	// A real delivery, which take could take off its consumer.
	sub := NewSubscriber(conn, nil)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(ctx, queue)
	require.NoError(t, err)
	var msg *message.Message
	select {
	case msg = <-msgs:
	case <-ctx.Done():
		t.Fatal("the subscriber handed out no delivery")
	}
	defer msg.Ack()

	c := &Control{cfg: Config{Commands: st, CommandLease: time.Second}, log: slog.Default()}
	wctx, stop := context.WithCancel(ctx)
	w := c.newWaiters(wctx)
	stop()
	w.wait()
	p := pending{cmd: Command{Command: CmdAcknowledge, CommandID: "late-1"}, res: store.CommandReservation{Running: true}}
	require.False(t, w.take(msg, p), "a repeat was handed to a waiter after Run waited for them: it outlives Run")
}
