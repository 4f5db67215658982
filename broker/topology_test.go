package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
)

func ptr(s string) *string { return &s }

func TestTopologyValidate(t *testing.T) {
	t.Parallel()
	base := broker.Topology{Exchange: "dlx", Queues: []string{"dlq"}, ControlQueue: "dlq.control"}
	cases := []struct {
		name    string
		sources []broker.SourceQueue
		want    []string // substrings of the error; nil means valid
	}{
		{"plain", []broker.SourceQueue{{Name: "orders", DeliveryLimit: 5, MessageTTL: time.Minute}}, nil},
		{"classic with ttl", []broker.SourceQueue{{Name: "orders", Type: "classic", MaxLength: 10}}, nil},
		{"into dlq through the default exchange", []broker.SourceQueue{{Name: "orders", DeadLetterExchange: ptr(""), DeadLetterRoutingKey: "dlq"}}, nil},
		{"own queue as source", []broker.SourceQueue{{Name: "dlq"}}, []string{`"dlq"`, "its own dead-letter queue"}},
		{"control queue as source", []broker.SourceQueue{{Name: "dlq.control"}}, []string{"its own dead-letter queue"}},
		{"self through default exchange", []broker.SourceQueue{{Name: "orders", DeadLetterExchange: ptr(""), DeadLetterRoutingKey: "orders"}}, []string{`"orders"`, "to itself"}},
		{"self with original key", []broker.SourceQueue{{Name: "orders", DeadLetterExchange: ptr("")}}, []string{"to itself"}},
		{"chain", []broker.SourceQueue{
			{Name: "orders", DeadLetterExchange: ptr(""), DeadLetterRoutingKey: "orders.dead"},
			{Name: "orders.dead"},
		}, []string{`"orders"`, `"orders.dead"`, "chains are not allowed"}},
		{"cycle", []broker.SourceQueue{
			{Name: "a", DeadLetterExchange: ptr(""), DeadLetterRoutingKey: "b"},
			{Name: "b", DeadLetterExchange: ptr(""), DeadLetterRoutingKey: "a"},
		}, []string{`"a" dead-letters into "b"`, `"b" dead-letters into "a"`}},
		{"classic delivery limit", []broker.SourceQueue{{Name: "orders", Type: "classic", DeliveryLimit: 3}}, []string{"delivery_limit needs a quorum queue"}},
		{"bad type", []broker.SourceQueue{{Name: "orders", Type: "stream"}}, []string{`type "stream"`}},
		{"drop-head loses at-least-once", []broker.SourceQueue{{Name: "orders", Overflow: "drop-head", MaxLength: 5}}, []string{"needs overflow reject-publish"}},
		{"duplicate", []broker.SourceQueue{{Name: "orders"}, {Name: "orders"}}, []string{"listed twice"}},
		{"empty name", []broker.SourceQueue{{Name: ""}}, []string{"source_queues[0].name is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			top := base
			top.Sources = tc.sources
			err := top.Validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, broker.ErrInvalidTopology))
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func newConn(t *testing.T) *broker.Conn {
	t.Helper()
	c, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "topology-test"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestTopologyDeclareIsIdempotent(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	app := dlqtest.Dial(t)
	top := broker.Topology{
		Exchange:     dlqtest.Name(t, "dlx"),
		Queues:       []string{dlqtest.Name(t, "dlq")},
		ControlQueue: dlqtest.Name(t, "ctl"),
		Sources: []broker.SourceQueue{
			{Name: dlqtest.Name(t, "orders"), DeliveryLimit: 3, MessageTTL: time.Hour, MaxLength: 1000},
			{Name: dlqtest.Name(t, "legacy"), Type: "classic", MaxLength: 10},
		},
	}
	dlqtest.DeleteQueues(t, app, top.Queues[0], top.ControlQueue, top.Sources[0].Name, top.Sources[1].Name)
	dlqtest.DeleteExchanges(t, app, top.Exchange)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		require.NoError(t, broker.DeclareOwn(ctx, c, top))
		require.NoError(t, broker.DeclareSources(ctx, c, top, discard()))
	}

	// The declared source dead-letters into dlq's queue.
	ch := dlqtest.Channel(t, app)
	require.NoError(t, ch.PublishWithContext(ctx, "", top.Sources[1].Name, false, false, amqp.Publishing{Body: []byte("x")}))
	ds, err := ch.Consume(top.Sources[1].Name, "", false, false, false, false, nil)
	require.NoError(t, err)
	var d amqp.Delivery
	select {
	case d = <-ds:
	case <-ctx.Done():
		t.Fatalf("the message published to %s was not delivered: %v", top.Sources[1].Name, ctx.Err())
	}
	require.NoError(t, d.Reject(false))
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, app, top.Queues[0]) == 1 },
		"dead letter did not reach %s", top.Queues[0])
}

func TestTopologyRefusals(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	app := dlqtest.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exchange := dlqtest.Name(t, "dlx")
	dlqtest.DeleteExchanges(t, app, exchange)

	t.Run("missing dead-letter exchange", func(t *testing.T) {
		src := dlqtest.Name(t, "src")
		top := broker.Topology{Exchange: exchange, Queues: []string{dlqtest.Name(t, "dlq")},
			Sources: []broker.SourceQueue{{Name: src, DeadLetterExchange: ptr(dlqtest.Name(t, "nowhere"))}}}
		err := broker.DeclareSources(ctx, c, top, discard())
		require.ErrorIs(t, err, broker.ErrInvalidTopology)
		require.Contains(t, err.Error(), "does not exist")
		require.Contains(t, err.Error(), src)
	})

	t.Run("missing dead-letter queue", func(t *testing.T) {
		src := dlqtest.Name(t, "src")
		target := dlqtest.Name(t, "gone")
		top := broker.Topology{Exchange: exchange, Queues: []string{dlqtest.Name(t, "dlq")},
			Sources: []broker.SourceQueue{{Name: src, DeadLetterExchange: ptr(""), DeadLetterRoutingKey: target}}}
		err := broker.DeclareSources(ctx, c, top, discard())
		require.ErrorIs(t, err, broker.ErrInvalidTopology)
		require.Contains(t, err.Error(), target)
	})

	t.Run("clashing arguments are explained, and the connection survives", func(t *testing.T) {
		q := dlqtest.Name(t, "dlq")
		ch := dlqtest.Channel(t, app)
		// Someone declared the queue as a classic queue that dead-letters.
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-dead-letter-exchange": "elsewhere"})
		require.NoError(t, err)
		dlqtest.DeleteQueues(t, app, q)
		top := broker.Topology{Exchange: exchange, Queues: []string{q}}
		err = broker.DeclareOwn(ctx, c, top)
		require.ErrorIs(t, err, broker.ErrPrecondition)
		require.Contains(t, err.Error(), q)
		require.Contains(t, err.Error(), "PRECONDITION_FAILED")
		require.Contains(t, err.Error(), "delete it")
		ok, _ := c.Connected()
		require.True(t, ok, "a refused declaration closes one channel, not the connection")
		// Retrying gives the same clear answer, not a crash.
		require.ErrorIs(t, broker.DeclareOwn(ctx, c, top), broker.ErrPrecondition)
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// DeclareIngest declares what ingest consumes from and nothing else: the
// declarer closes Tried after it, so consumers do not wait for the control
// queue. DeclareOwn then adds the control queue.
func TestDeclareIngestLeavesTheControlQueue(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	app := dlqtest.Dial(t)
	top := broker.Topology{Exchange: dlqtest.Name(t, "dlx"), Queues: []string{dlqtest.Name(t, "dlq")}, ControlQueue: dlqtest.Name(t, "ctl")}
	dlqtest.DeleteQueues(t, app, top.Queues[0], top.ControlQueue)
	dlqtest.DeleteExchanges(t, app, top.Exchange)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exists := func(queue string) bool {
		ch, err := app.Channel() // a 404 closes it
		require.NoError(t, err)
		defer ch.Close()
		_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return false
		}
		require.NoError(t, err)
		return true
	}

	require.NoError(t, broker.DeclareIngest(ctx, c, top))
	ok, err := broker.ExchangeExists(ctx, c, top.Exchange)
	require.NoError(t, err)
	require.True(t, ok, "the exchange is declared")
	require.True(t, exists(top.Queues[0]), "dlq's queue is declared")
	require.False(t, exists(top.ControlQueue), "DeclareIngest declared the control queue")

	require.NoError(t, broker.DeclareOwn(ctx, c, top))
	require.True(t, exists(top.ControlQueue), "DeclareOwn did not declare the control queue")
}
