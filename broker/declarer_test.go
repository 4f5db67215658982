package broker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
)

func TestDeclarerDeclaresAndReturns(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	app := dlqtest.Dial(t)
	top := broker.Topology{Exchange: dlqtest.Name(t, "dlx"), Queues: []string{dlqtest.Name(t, "dlq")}, ControlQueue: dlqtest.Name(t, "ctl")}
	dlqtest.DeleteQueues(t, app, top.Queues[0], top.ControlQueue)
	dlqtest.DeleteExchanges(t, app, top.Exchange)
	var logs syncBuffer
	d, err := broker.NewDeclarer(broker.DeclarerConfig{Conn: c, Topology: top, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	require.NoError(t, d.Run(ctx))
	select {
	case <-d.Tried():
	default:
		t.Fatal("Tried is not closed after Run returned")
	}
	require.Equal(t, 1, logs.lines("topology declared"))
	ok, err := broker.ExchangeExists(ctx, c, top.Exchange)
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, dlqtest.QueueDepth(t, app, top.Queues[0]), "dlq's queue exists")
}

// A refusal does not end Run: the first attempt counts as tried (serve
// goes on starting), the explanation is logged, and Run retries until
// its context ends.
func TestDeclarerRetriesARefusal(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	app := dlqtest.Dial(t)
	q := dlqtest.Name(t, "dlq")
	top := broker.Topology{Exchange: dlqtest.Name(t, "dlx"), Queues: []string{q}}
	dlqtest.DeleteQueues(t, app, q)
	dlqtest.DeleteExchanges(t, app, top.Exchange)
	ch := dlqtest.Channel(t, app)
	_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "classic", "x-dead-letter-exchange": "elsewhere"})
	require.NoError(t, err)

	logs, done, cancel := runDeclarerUntilTried(t, c, top)
	defer cancel()
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		return logs.lines("cannot declare topology; retrying", "declared with other arguments") == 1
	}, "the refusal is not logged with its explanation")
	select {
	case err := <-done:
		t.Fatalf("Run returned after a refusal: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
}

func TestDeclarerConfigNamesTheMissingField(t *testing.T) {
	t.Parallel()
	_, err := broker.NewDeclarer(broker.DeclarerConfig{Topology: broker.Topology{Exchange: "x"}})
	require.ErrorContains(t, err, "Conn")
	_, err = broker.NewDeclarer(broker.DeclarerConfig{Conn: newConn(t)})
	require.ErrorContains(t, err, "Topology.Exchange")
}

// A refused control queue does not hold ingest back: Tried closes with the
// exchange and dlq's queue declared and bound, while the control queue's
// refusal is logged with its name and retried, and the topology does not
// count as declared.
func TestDeclarerDeclaresIngestDespiteControlRefusal(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	app := dlqtest.Dial(t)
	q, ctl := dlqtest.Name(t, "dlq"), dlqtest.Name(t, "ctl")
	top := broker.Topology{Exchange: dlqtest.Name(t, "dlx"), Queues: []string{q}, ControlQueue: ctl}
	dlqtest.DeleteQueues(t, app, q, ctl)
	dlqtest.DeleteExchanges(t, app, top.Exchange)
	ch := dlqtest.Channel(t, app)
	_, err := ch.QueueDeclare(ctl, true, false, false, false, amqp.Table{"x-queue-type": "classic", "x-max-length": int32(5)})
	require.NoError(t, err)

	logs, done, cancel := runDeclarerUntilTried(t, c, top)
	defer cancel()
	// The queue ingest consumes from is there, bound: a dead letter
	// published to the exchange lands in it.
	require.Zero(t, dlqtest.QueueDepth(t, app, q), "dlq's queue exists")
	require.NoError(t, dlqtest.Channel(t, app).PublishWithContext(context.Background(), top.Exchange, "orders.created", false, false, amqp.Publishing{Body: []byte("x")}))
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, app, q) == 1 }, "dlq's queue is not bound to the exchange")
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		return logs.lines("cannot declare topology; retrying", ctl) == 1
	}, "the control queue's refusal is not logged")
	require.Zero(t, logs.lines("topology declared"), "the topology counts as declared while the control queue is refused")
	cancel()
	require.NoError(t, <-done)
}

// runDeclarerUntilTried runs a Declarer of top on c, logging into the
// returned buffer, and returns once its first attempt is over; done gets
// Run's result after cancel.
func runDeclarerUntilTried(t *testing.T, c *broker.Conn, top broker.Topology) (logs *syncBuffer, done <-chan error, cancel context.CancelFunc) {
	t.Helper()
	logs = &syncBuffer{}
	d, err := broker.NewDeclarer(broker.DeclarerConfig{Conn: c, Topology: top, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	select {
	case <-d.Tried():
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the first attempt did not end")
	}
	return logs, ran, cancel
}
