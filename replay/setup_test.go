package replay_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// bundle is one isolated dlq: its own schema, exchange and queue, a
// running consumer and replay service, and an application-side AMQP
// connection.
type bundle struct {
	st       *store.Store
	dsn      string
	db       *pgxpool.Pool // the test's own pool on st's schema, for SQL (dlqtest.DB)
	conn     *broker.Conn
	app      *amqp.Connection
	ch       *amqp.Channel
	exchange string
	queue    string
	reg      *prometheus.Registry
	svc      *replay.Service
	stopSvc  func()
}

type setupOpts struct {
	lease       time.Duration
	batchSize   int
	maxReplays  int
	noConsumer  bool
	noService   bool
	window      int
	maxMessages int64
	keepUserID  bool
	retention   time.Duration
	// confirmTimeout is replay.confirm_timeout; 0 takes the default.
	confirmTimeout time.Duration
	// connName names dlq's AMQP connection ("dlq-replay-test" unless set):
	// a test that closes it from the broker's side gives it its own.
	connName string
	// onUnknown is replay.on_unknown; "" takes the default (retry).
	onUnknown string
	// channelMax, when set, caps the channels of dlq's AMQP connection
	// (the URL's channel_max), so that a test can use them all up.
	channelMax int
	// logger is the replay service's; nil takes slog.Default().
	logger *slog.Logger
	// unknownRetries is replay.unknown_retries; 0 takes the default.
	unknownRetries int
	// shutdownTimeout bounds the drain when the service stops; 0 takes 10s.
	shutdownTimeout time.Duration
}

var operator = store.Actor{Name: "test", Role: "operator", Via: "test"}

func setup(t *testing.T, opts ...func(*setupOpts)) *bundle {
	t.Helper()
	o := setupOpts{lease: 3 * time.Second, batchSize: 100}
	for _, f := range opts {
		f(&o)
	}
	st, dsn := dlqtest.Store(t)
	b := &bundle{
		st: st, dsn: dsn, db: dlqtest.DB(t, dsn),
		exchange: dlqtest.Name(t, "dlx"),
		queue:    dlqtest.Name(t, "dlq"),
		reg:      prometheus.NewRegistry(),
	}
	b.app = dlqtest.Dial(t)
	b.ch = dlqtest.Channel(t, b.app)
	dlqtest.DeleteQueues(t, b.app, b.queue)
	dlqtest.DeleteExchanges(t, b.app, b.exchange)

	amqpURL := dlqtest.AMQPURL()
	if o.channelMax > 0 {
		amqpURL = withQuery(t, amqpURL, "channel_max", strconv.Itoa(o.channelMax))
	}
	conn, err := broker.NewConn(broker.ConnConfig{URL: amqpURL, Name: cmp.Or(o.connName, "dlq-replay-test")})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	b.conn = conn
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, broker.DeclareOwn(ctx, conn, broker.Topology{Exchange: b.exchange, Queues: []string{b.queue}}))

	if !o.noConsumer {
		cons, err := consumer.New(consumer.Config{
			Conn: conn, Store: st, Exchange: b.exchange, Queues: []string{b.queue},
			Consumers: 1, Prefetch: 200, BatchSize: 100, Linger: 10 * time.Millisecond, Registerer: b.reg,
		})
		require.NoError(t, err)
		runCtx, runCancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cons.Run(runCtx)
		}()
		t.Cleanup(func() { runCancel(); <-done })
		dlqtest.Eventually(t, 10*time.Second, func() bool { return cons.Ready() == nil }, "consumer not ready: %v", cons.Ready())
	}
	b.svc = b.newService(t, o, b.reg)
	if !o.noService {
		b.stopSvc = b.run(t, b.svc)
	}
	return b
}

func (b *bundle) newService(t *testing.T, o setupOpts, reg prometheus.Registerer) *replay.Service {
	svc, err := replay.New(replay.Config{
		Store: b.st, Conn: b.conn, Lease: o.lease, BatchSize: o.batchSize, PollInterval: 50 * time.Millisecond,
		MaxReplays: o.maxReplays, Window: o.window, MaxTaskMessages: o.maxMessages,
		ShutdownTimeout: cmp.Or(o.shutdownTimeout, 10*time.Second), Registerer: reg, KeepUserID: o.keepUserID, ProgressRetention: o.retention,
		ConfirmTimeout: o.confirmTimeout, OnUnknown: o.onUnknown, UnknownRetries: o.unknownRetries, Logger: o.logger,
	})
	require.NoError(t, err)
	return svc
}

// withQuery returns rawURL with the query parameter key set to value.
func withQuery(t *testing.T, rawURL, key, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// run runs svc until the returned stop is called (or the test ends).
func (b *bundle) run(t *testing.T, svc *replay.Service) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		require.NoError(t, svc.Run(ctx))
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// sourceQueue declares an application queue that dead-letters to the
// bundle's exchange.
func (b *bundle) sourceQueue(t *testing.T, args amqp.Table) string {
	t.Helper()
	return dlqtest.SourceQueue(t, b.app, b.ch, b.exchange, "quorum", args)
}

func (b *bundle) publish(t *testing.T, exchange, key string, p amqp.Publishing) {
	t.Helper()
	require.NoError(t, b.ch.PublishWithContext(context.Background(), exchange, key, false, false, p))
}

// rejectAll consumes n messages from queue and rejects them without
// requeue, which dead-letters them. It returns what it received.
func (b *bundle) rejectAll(t *testing.T, queue string, n int) []amqp.Delivery {
	t.Helper()
	return dlqtest.RejectAll(t, b.app, queue, n)
}

// deadLetter publishes n messages to a fresh source queue and rejects them,
// and waits until dlq stored them. It returns the queue and the ids.
func (b *bundle) deadLetter(t *testing.T, n int) (string, []int64) {
	t.Helper()
	src := b.sourceQueue(t, nil)
	for i := 0; i < n; i++ {
		b.publish(t, "", src, amqp.Publishing{Body: []byte(fmt.Sprintf("message %d", i)), MessageId: strconv.Itoa(i)})
	}
	b.rejectAll(t, src, n)
	b.waitRows(t, n, "source_queue = $1", src)
	return src, b.ids(t, "source_queue = $1", src)
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), "SELECT count(*) FROM dead_messages WHERE "+where, args...).Scan(&n))
	return n
}

func (b *bundle) ids(t *testing.T, where string, args ...any) []int64 {
	t.Helper()
	rows, err := b.db.Query(context.Background(), "SELECT id FROM dead_messages WHERE "+where+" ORDER BY id", args...)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func (b *bundle) waitRows(t *testing.T, n int, where string, args ...any) {
	t.Helper()
	dlqtest.Eventually(t, 30*time.Second, func() bool { return b.count(t, where, args...) >= n },
		"want %d rows where %s, have %d", n, where, b.count(t, where, args...))
}

// waitTask waits until the task reaches one of the statuses.
func (b *bundle) waitTask(t *testing.T, id int64, timeout time.Duration, statuses ...string) replay.Task {
	t.Helper()
	var task replay.Task
	dlqtest.Eventually(t, timeout, func() bool {
		var err error
		task, err = b.svc.Get(context.Background(), id)
		require.NoError(t, err)
		for _, s := range statuses {
			if task.Status == s {
				return true
			}
		}
		return false
	}, "task %d never reached %v: %+v", id, statuses, &task)
	return task
}

// summary returns queue_summary's count for a queue and status.
func (b *bundle) summary(t *testing.T, queue, status string) int64 {
	t.Helper()
	var n int64
	err := b.db.QueryRow(context.Background(),
		`SELECT coalesce(sum(messages), 0) FROM queue_summary WHERE source_queue = $1 AND status = $2`, queue, status).Scan(&n)
	require.NoError(t, err)
	return n
}

// requireSummaryExact checks the invariant: queue_summary equals a count
// of dead_messages for every queue and status.
func (b *bundle) requireSummaryExact(t *testing.T) {
	t.Helper()
	rows, err := b.db.Query(context.Background(), `
SELECT coalesce(a.source_queue, s.source_queue), coalesce(a.status, s.status), coalesce(a.n, 0), coalesce(s.messages, 0),
       coalesce(a.bytes, 0), coalesce(s.bytes, 0)
FROM (SELECT source_queue, status, count(*) AS n, sum(body_size) AS bytes FROM dead_messages GROUP BY 1, 2) a
FULL JOIN queue_summary s ON s.source_queue = a.source_queue AND s.status = a.status
WHERE coalesce(a.n, 0) <> coalesce(s.messages, 0) OR coalesce(a.bytes, 0) <> coalesce(s.bytes, 0)`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var q, s string
		var n, m, nb, mb int64
		require.NoError(t, rows.Scan(&q, &s, &n, &m, &nb, &mb))
		t.Errorf("queue_summary drifted for %s/%s: table has %d messages (%d bytes), summary says %d (%d bytes)", q, s, n, nb, m, mb)
	}
	require.NoError(t, rows.Err())
	var drift int
	require.NoError(t, b.db.QueryRow(context.Background(), `
WITH a AS (
  SELECT group_id,
    count(*) FILTER (WHERE status = 'pending') AS p, count(*) FILTER (WHERE status = 'replaying') AS rg,
    count(*) FILTER (WHERE status = 'replayed') AS rd, count(*) FILTER (WHERE status = 'acknowledged') AS ak
  FROM dead_messages WHERE group_id IS NOT NULL GROUP BY 1)
SELECT count(*) FROM a FULL JOIN failure_groups g ON g.id = a.group_id
WHERE coalesce(a.p, 0) <> g.pending OR coalesce(a.rg, 0) <> g.replaying OR coalesce(a.rd, 0) <> g.replayed
   OR coalesce(a.ak, 0) <> g.acknowledged OR g.id IS NULL`).Scan(&drift))
	require.Zero(t, drift, "failure_groups differs from a recount")
}

// consume reads n messages from queue (acking them) within timeout.
func (b *bundle) consume(t *testing.T, queue string, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	ch := dlqtest.Channel(t, b.app)
	require.NoError(t, ch.Qos(1000, 0, false))
	tag := dlqtest.Name(t, "c")
	ds, err := ch.Consume(queue, tag, false, false, false, false, nil)
	require.NoError(t, err)
	defer func() { _ = ch.Cancel(tag, false) }()
	var out []amqp.Delivery
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case d := <-ds:
			require.NoError(t, d.Ack(false))
			out = append(out, d)
		case <-deadline:
			t.Fatalf("received %d of %d messages from %s", len(out), n, queue)
		}
	}
	return out
}

// seed stores n pending messages that died in queue (published through the
// default exchange, so they replay straight back to it) without going
// through RabbitMQ, and returns their ids.
func (b *bundle) seed(t *testing.T, queue string, n int) []int64 {
	t.Helper()
	return b.seedWith(t, queue, n, `{"delivery_mode":2}`)
}

// seedWith is seed with the given stored properties (JSON).
func (b *bundle) seedWith(t *testing.T, queue string, n int, properties string) []int64 {
	t.Helper()
	now := time.Now().UTC()
	msgs := make([]store.NewMessage, 0, 500)
	flush := func() {
		if len(msgs) == 0 {
			return
		}
		_, err := b.st.IngestBatch(context.Background(), store.IngestBatch{ID: store.NewBatchID(), Consumer: "seed", Messages: msgs})
		require.NoError(t, err)
		msgs = msgs[:0]
	}
	for i := 0; i < n; i++ {
		msgs = append(msgs, store.NewMessage{
			MessageID: fmt.Sprintf("%s-%d", queue, i), SourceQueue: queue, SourceRoutingKey: queue,
			DeadLetterQueue: b.queue, Reason: "rejected", DeathCount: 1,
			Properties: []byte(properties), Headers: []byte(`{"x-app":"seed"}`),
			Body: []byte(fmt.Sprintf("seeded %d", i)), FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1),
		})
		if len(msgs) == cap(msgs) {
			flush()
		}
	}
	flush()
	return b.ids(t, "source_queue = $1", queue)
}

// targetQueue declares a plain quorum queue (no dead-lettering) for
// replayed messages to land in.
func (b *bundle) targetQueue(t *testing.T) string {
	t.Helper()
	name := dlqtest.Name(t, "tgt")
	_, err := b.ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, b.app, name)
	return name
}
