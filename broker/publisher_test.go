package broker_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
)

type outcomes struct {
	mu  sync.Mutex
	got map[string][]broker.Result
}

func (o *outcomes) done(id string) func(broker.Result) {
	return func(r broker.Result) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.got[id] = append(o.got[id], r)
	}
}

func (o *outcomes) of(id string) []broker.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]broker.Result(nil), o.got[id]...)
}

func newPublisher(t *testing.T, name string, window int) (*broker.Conn, *broker.Publisher) {
	t.Helper()
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: name})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	p, err := broker.NewPublisher(broker.PublisherConfig{Conn: conn, Window: window})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return conn, p
}

func msg(id string) amqp.Publishing {
	return amqp.Publishing{Headers: amqp.Table{broker.HeaderReplayID: id}, Body: []byte(id)}
}

// Routed messages are acked; unroutable ones returned; a missing exchange
// fails the publish that hit it, and the next publish works on a new
// channel.
func TestPublisherOutcomes(t *testing.T) {
	t.Parallel()
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	q := dlqtest.Name(t, "pub")
	_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, q)
	_, p := newPublisher(t, dlqtest.Name(t, "conn"), 100)
	o := &outcomes{got: map[string][]broker.Result{}}
	ctx := context.Background()

	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("ok-%d", i)
		require.NoError(t, p.Publish(ctx, "", q, msg(id), o.done(id)))
	}
	require.NoError(t, p.Publish(ctx, "", dlqtest.Name(t, "nowhere"), msg("returned"), o.done("returned")))
	require.NoError(t, p.Wait(ctx))
	for i := 0; i < 300; i++ {
		r := o.of(fmt.Sprintf("ok-%d", i))
		require.Len(t, r, 1, "one outcome per publish")
		require.Equal(t, broker.Acked, r[0].Outcome)
	}
	r := o.of("returned")
	require.Len(t, r, 1)
	require.Equal(t, broker.Returned, r[0].Outcome)
	require.Contains(t, r[0].Reason, "NO_ROUTE")

	require.NoError(t, p.Publish(ctx, dlqtest.Name(t, "noexchange"), "k", msg("missing"), o.done("missing")))
	require.NoError(t, p.Wait(ctx))
	r = o.of("missing")
	require.Len(t, r, 1)
	require.Equal(t, broker.Failed, r[0].Outcome)
	require.Contains(t, r[0].Reason, "does not exist")

	require.NoError(t, p.Publish(ctx, "", q, msg("after"), o.done("after")))
	require.NoError(t, p.Wait(ctx))
	require.Equal(t, broker.Acked, o.of("after")[0].Outcome)
	require.Equal(t, 301, dlqtest.QueueDepth(t, app, q))

	err = p.Publish(ctx, "", q, amqp.Publishing{Body: []byte("no id")}, nil)
	require.ErrorIs(t, err, broker.ErrNoCorrelation)

	exists, err := broker.ExchangeExists(ctx, mustConn(t), "amq.topic")
	require.NoError(t, err)
	require.True(t, exists)
	exists, err = broker.ExchangeExists(ctx, mustConn(t), dlqtest.Name(t, "noexchange"))
	require.NoError(t, err)
	require.False(t, exists)
}

func mustConn(t *testing.T) *broker.Conn {
	t.Helper()
	c, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "dlq-test"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// When the connection dies with confirms outstanding, each of those
// publishes ends exactly once, as acked or unknown (never "not
// delivered"), and publishing resumes on the new connection.
//
// Whether confirms are outstanding at the instant RabbitMQ closes the
// connection is up to the scheduler: on a loaded host the publisher can sit
// blocked on its socket while every confirm arrives. Such a round proves
// less, so the scenario runs again, up to three rounds, until one had
// confirms outstanding; every round's outcomes are checked all the same.
func TestPublisherUnknownOnConnectionLoss(t *testing.T) {
	t.Parallel()
	for round := 1; ; round++ {
		counts := publishThroughConnectionLoss(t, round)
		if counts[broker.Unknown] > 0 {
			return
		}
		require.Less(t, round, 3, "in %d rounds no confirm was outstanding when the connection went", round)
	}
}

// publishThroughConnectionLoss publishes continuously on a fresh publisher
// while RabbitMQ closes its connection, checks every outcome and that
// publishing resumes, and returns the outcome counts.
func publishThroughConnectionLoss(t *testing.T, round int) map[broker.Outcome]int {
	t.Helper()
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	q := dlqtest.Name(t, fmt.Sprintf("pub%d", round))
	_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, q)
	name := dlqtest.Name(t, fmt.Sprintf("conn%d", round))
	_, p := newPublisher(t, name, 5000)
	o := &outcomes{got: map[string][]broker.Result{}}
	ctx := context.Background()

	closed := make(chan struct{})
	n := 0
	for ; ; n++ {
		id := fmt.Sprintf("m-%d", n)
		require.NoError(t, p.Publish(ctx, "", q, msg(id), o.done(id)))
		if n == 0 {
			go func() {
				defer close(closed)
				if err := dlqtest.CloseConnection(name); err != nil {
					t.Error(err)
				}
			}()
		}
		select {
		case <-closed:
		default:
			continue
		}
		break
	}
	n++
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, p.Wait(wctx))
	counts := map[broker.Outcome]int{}
	for i := 0; i < n; i++ {
		r := o.of(fmt.Sprintf("m-%d", i))
		require.Len(t, r, 1, "one outcome per publish")
		counts[r[0].Outcome]++
		if r[0].Outcome == broker.Unknown {
			require.Contains(t, r[0].Reason, "outcome unknown")
		}
	}
	t.Logf("round %d outcomes: %v", round, counts)
	// A publish that reached the dead channel before the publisher knew
	// it was dead never left: unsent, not failed.
	require.Equal(t, n, counts[broker.Acked]+counts[broker.Unknown]+counts[broker.Unsent])
	require.LessOrEqual(t, counts[broker.Acked], dlqtest.QueueDepth(t, app, q), "every ack is a routed message")

	dlqtest.Eventually(t, 30*time.Second, func() bool {
		ok := make(chan broker.Result, 1)
		if err := p.Publish(ctx, "", q, msg(fmt.Sprintf("after-%d", time.Now().UnixNano())), func(r broker.Result) { ok <- r }); err != nil {
			return false
		}
		return (<-ok).Outcome == broker.Acked
	}, "publishing did not resume after the reconnect")
	return counts
}

// A publisher that cannot open a channel (every channel its connection may
// have, channel_max, is in use) sends nothing and says so with
// ErrNoChannel, without calling done; the same message goes out once a
// channel is free.
func TestPublisherNoChannel(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(dlqtest.AMQPURL())
	require.NoError(t, err)
	q := u.Query()
	q.Set("channel_max", "2")
	u.RawQuery = q.Encode()
	conn, err := broker.NewConn(broker.ConnConfig{URL: u.String(), Name: dlqtest.Name(t, "conn")})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	p, err := broker.NewPublisher(broker.PublisherConfig{Conn: conn, Window: 10})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx := context.Background()
	var held []*amqp.Channel
	for {
		ch, err := conn.Channel(ctx)
		if err != nil {
			require.ErrorIs(t, err, amqp.ErrChannelMax)
			break
		}
		held = append(held, ch)
	}
	require.NotEmpty(t, held)

	o := &outcomes{got: map[string][]broker.Result{}}
	nowhere := dlqtest.Name(t, "nowhere")
	err = p.Publish(ctx, "", nowhere, msg("m"), o.done("m"))
	require.ErrorIs(t, err, broker.ErrNoChannel)
	require.ErrorIs(t, err, amqp.ErrChannelMax, "the cause is kept")
	require.Zero(t, p.InFlight())
	require.Empty(t, o.of("m"), "done is not called for a message not sent")

	require.NoError(t, held[0].Close())
	require.NoError(t, p.Publish(ctx, "", nowhere, msg("m"), o.done("m")))
	require.NoError(t, p.Wait(ctx))
	r := o.of("m")
	require.Len(t, r, 1)
	require.Equal(t, broker.Returned, r[0].Outcome, "sent this time: unroutable, as it was addressed")
}
