package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// bundle is one isolated dlq pipeline: its own schema, exchange and queue,
// a running consumer, and an application-side AMQP connection.
type bundle struct {
	st       *store.Store
	dsn      string
	db       *pgxpool.Pool // the test's own pool on st's schema, for SQL (dlqtest.DB)
	app      *amqp.Connection
	ch       *amqp.Channel
	exchange string
	queue    string
	reg      *prometheus.Registry
	connName string // dlq's connection, as RabbitMQ names it
	cons     *consumer.Consumer
	stop     func()
}

type setupOpts struct {
	batchSize int
	prefetch  int
	linger    time.Duration
	consumers int
}

func setup(t *testing.T, opts ...func(*setupOpts)) *bundle {
	t.Helper()
	o := setupOpts{batchSize: 100, prefetch: 200, linger: 20 * time.Millisecond, consumers: 2}
	for _, f := range opts {
		f(&o)
	}
	st, dsn := dlqtest.Store(t)
	b := &bundle{
		st:       st,
		dsn:      dsn,
		db:       dlqtest.DB(t, dsn),
		exchange: dlqtest.Name(t, "dlx"),
		queue:    dlqtest.Name(t, "dlq"),
		reg:      prometheus.NewRegistry(),
		connName: dlqtest.Name(t, "conn"),
	}
	b.app = dlqtest.Dial(t)
	b.ch = dlqtest.Channel(t, b.app)
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: b.connName})
	require.NoError(t, err)
	declareOwn(t, b.app, conn, b.exchange, b.queue)

	cons, err := consumer.New(consumer.Config{
		Conn: conn, Store: st, Exchange: b.exchange, Queues: []string{b.queue},
		Consumers: o.consumers, Prefetch: o.prefetch, BatchSize: o.batchSize, Linger: o.linger,
		Registerer: b.reg,
	})
	require.NoError(t, err)
	b.cons = cons
	runCtx, runCancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	var once bool
	b.stop = func() {
		if once {
			return
		}
		once = true
		runCancel()
		require.NoError(t, <-done, "Run returns nil after a clean shutdown")
		conn.Close()
	}
	t.Cleanup(b.stop)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return cons.Ready() == nil }, "consumer not ready: %v", cons.Ready())
	return b
}

// declareOwn declares dlq's own exchange and queue under names unique to
// the test, removed when it ends, through conn (a connection of its own
// when nil).
func declareOwn(t *testing.T, app *amqp.Connection, conn *broker.Conn, exchange, queue string) {
	t.Helper()
	dlqtest.DeleteQueues(t, app, queue)
	dlqtest.DeleteExchanges(t, app, exchange)
	if conn == nil {
		c, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "dlq-test"})
		require.NoError(t, err)
		defer c.Close()
		conn = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, broker.DeclareOwn(ctx, conn, broker.Topology{Exchange: exchange, Queues: []string{queue}}))
}

// sourceQueue declares an application queue that dead-letters to the
// bundle's exchange.
func (b *bundle) sourceQueue(t *testing.T, typ string, args amqp.Table) string {
	t.Helper()
	return dlqtest.SourceQueue(t, b.app, b.ch, b.exchange, typ, args)
}

func (b *bundle) publish(t *testing.T, exchange, key string, p amqp.Publishing) {
	t.Helper()
	require.NoError(t, b.ch.PublishWithContext(context.Background(), exchange, key, false, false, p))
}

// rejectAll consumes n messages from queue and rejects them without
// requeue, which dead-letters them.
func (b *bundle) rejectAll(t *testing.T, queue string, n int) {
	t.Helper()
	dlqtest.RejectAll(t, b.app, queue, n)
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), "SELECT count(*) FROM dead_messages WHERE "+where, args...).Scan(&n))
	return n
}

func (b *bundle) waitRows(t *testing.T, n int, where string, args ...any) {
	t.Helper()
	dlqtest.Eventually(t, 30*time.Second, func() bool { return b.count(t, where, args...) >= n },
		"want %d rows where %s, have %d", n, where, b.count(t, where, args...))
}

type storedRow struct {
	SourceQueue, SourceExchange, SourceRoutingKey, DeadLetterQueue, Reason, Status string
	DeathCount                                                                     int64
	MessageID                                                                      *string
	Body                                                                           []byte
	// Headers are as reads show them; StoredHeaders as the column holds
	// them (without the x-death ingest leaves to the death record).
	Headers, StoredHeaders, Properties []byte
	FailureType, FailureMessage        *string
	Failure                            []byte
}

func (b *bundle) rows(t *testing.T, where string, args ...any) []storedRow {
	t.Helper()
	rs, err := b.db.Query(context.Background(), `
SELECT source_queue, source_exchange, source_routing_key, dead_letter_queue, reason, status,
       death_count, message_id, body, headers::text, properties::text, failure_type, failure_message, failure::text,
       x_death::text
FROM dead_messages WHERE `+where+` ORDER BY id`, args...)
	require.NoError(t, err)
	defer rs.Close()
	var out []storedRow
	for rs.Next() {
		var r storedRow
		var h, p string
		var f, xd *string
		require.NoError(t, rs.Scan(&r.SourceQueue, &r.SourceExchange, &r.SourceRoutingKey, &r.DeadLetterQueue,
			&r.Reason, &r.Status, &r.DeathCount, &r.MessageID, &r.Body, &h, &p, &r.FailureType, &r.FailureMessage, &f, &xd))
		r.StoredHeaders, r.Headers, r.Properties = []byte(h), []byte(h), []byte(p)
		if xd != nil {
			r.Headers = broker.RestoreDeathHeader(r.Headers, []byte(*xd))
		}
		if f != nil {
			r.Failure = []byte(*f)
		}
		out = append(out, r)
	}
	require.NoError(t, rs.Err())
	return out
}

func TestIngestReasons(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("rejected from classic", func(t *testing.T) {
		src := b.sourceQueue(t, "classic", nil)
		b.publish(t, "", src, amqp.Publishing{Body: []byte("classic reject"), MessageId: "m-classic"})
		b.rejectAll(t, src, 1)
		b.waitRows(t, 1, "source_queue = $1", src)
		r := b.rows(t, "source_queue = $1", src)[0]
		require.Equal(t, "rejected", r.Reason)
		require.Equal(t, "", r.SourceExchange)
		require.Equal(t, src, r.SourceRoutingKey)
		require.Equal(t, b.queue, r.DeadLetterQueue)
		require.Equal(t, int64(1), r.DeathCount)
		require.Equal(t, "pending", r.Status)
		require.Equal(t, "m-classic", *r.MessageID)
		require.Equal(t, "classic reject", string(r.Body))
	})

	t.Run("rejected from quorum through a named exchange", func(t *testing.T) {
		src := b.sourceQueue(t, "quorum", nil)
		ex := dlqtest.Name(t, "app")
		require.NoError(t, b.ch.ExchangeDeclare(ex, "direct", false, true, false, false, nil))
		dlqtest.DeleteExchanges(t, b.app, ex)
		require.NoError(t, b.ch.QueueBind(src, "orders.created", ex, false, nil))
		b.publish(t, ex, "orders.created", amqp.Publishing{Body: []byte("quorum reject")})
		b.rejectAll(t, src, 1)
		b.waitRows(t, 1, "source_queue = $1", src)
		r := b.rows(t, "source_queue = $1", src)[0]
		require.Equal(t, "rejected", r.Reason)
		require.Equal(t, ex, r.SourceExchange)
		require.Equal(t, "orders.created", r.SourceRoutingKey)
		require.Equal(t, int64(1), r.DeathCount)
		require.Nil(t, r.MessageID)
	})

	t.Run("expired", func(t *testing.T) {
		src := b.sourceQueue(t, "classic", amqp.Table{"x-message-ttl": int32(1)})
		b.publish(t, "", src, amqp.Publishing{Body: []byte("too late")})
		b.waitRows(t, 1, "source_queue = $1", src)
		r := b.rows(t, "source_queue = $1", src)[0]
		require.Equal(t, "expired", r.Reason)
		require.Equal(t, int64(1), r.DeathCount)
		require.Equal(t, "", r.SourceExchange, "published to the default exchange")
		require.Equal(t, src, r.SourceRoutingKey)
		require.Equal(t, b.queue, r.DeadLetterQueue)
		require.Equal(t, "too late", string(r.Body))
	})

	t.Run("maxlen", func(t *testing.T) {
		src := b.sourceQueue(t, "classic", amqp.Table{"x-max-length": int32(1)})
		for _, body := range []string{"first", "second", "third"} {
			b.publish(t, "", src, amqp.Publishing{Body: []byte(body)})
		}
		b.waitRows(t, 2, "source_queue = $1", src)
		rows := b.rows(t, "source_queue = $1", src)
		require.Len(t, rows, 2)
		for _, r := range rows {
			require.Equal(t, "maxlen", r.Reason)
			require.Equal(t, int64(1), r.DeathCount)
			require.Equal(t, src, r.SourceRoutingKey)
			require.Equal(t, "", r.SourceExchange)
		}
		// The queue drops the oldest; the two consumers commit in either
		// order, so ids say nothing about which came first.
		require.ElementsMatch(t, []string{"first", "second"}, []string{string(rows[0].Body), string(rows[1].Body)})
	})

	t.Run("quorum delivery limit", func(t *testing.T) {
		src := b.sourceQueue(t, "quorum", amqp.Table{"x-delivery-limit": int32(1)})
		b.publish(t, "", src, amqp.Publishing{Body: []byte("poison")})
		ch := dlqtest.Channel(t, b.app)
		ds, err := ch.Consume(src, "", false, false, false, false, nil)
		require.NoError(t, err)
		// Requeue until RabbitMQ gives up on it.
		deadline := time.After(20 * time.Second)
	loop:
		for {
			select {
			case d := <-ds:
				require.NoError(t, d.Nack(false, true))
			case <-deadline:
				t.Fatal("message never reached its delivery limit")
			default:
				if b.count(t, "source_queue = $1", src) == 1 {
					break loop
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		r := b.rows(t, "source_queue = $1", src)[0]
		require.Equal(t, "delivery_limit", r.Reason)
		require.Equal(t, "poison", string(r.Body))
		require.Equal(t, int64(1), r.DeathCount)
		require.Equal(t, src, r.SourceRoutingKey)
		require.Equal(t, "pending", r.Status)
	})

	// Every delivery was acknowledged after its commit: once the consumers
	// are gone, nothing of theirs went back to dlq's queue.
	b.stop()
	require.Zero(t, dlqtest.QueueDepth(t, b.app, b.queue), "dlq's queue holds no unacknowledged leftovers")
	require.Equal(t, 6, b.count(t, "TRUE"), "one row per dead letter (two rejected, one expired, two overflowed, one over its limit), none twice")
}
