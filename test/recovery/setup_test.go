package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
}

// bundle is one isolated dlq in this process: its own schema, dead-letter
// exchange and queue, a consumer that categorises with the default rules,
// a replay service, and an application-side connection.
type bundle struct {
	st       *store.Store
	dsn      string
	db       *pgxpool.Pool // the test's own pool on st's schema (dlqtest.DB)
	conn     *broker.Conn
	app      *amqp.Connection
	ch       *amqp.Channel
	exchange string
	queue    string
	replays  *replay.Service
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st, dsn := dlqtest.Store(t)
	b := &bundle{st: st, dsn: dsn, db: dlqtest.DB(t, dsn), exchange: dlqtest.Name(t, "dlx"), queue: dlqtest.Name(t, "dlq")}
	b.app = dlqtest.Dial(t)
	b.ch = dlqtest.Channel(t, b.app)
	dlqtest.DeleteQueues(t, b.app, b.queue)
	dlqtest.DeleteExchanges(t, b.app, b.exchange)
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "dlq-recovery-test", Logger: quiet()})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	b.conn = conn
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, broker.DeclareOwn(ctx, conn, broker.Topology{Exchange: b.exchange, Queues: []string{b.queue}}))

	rules, err := category.New(nil, true)
	require.NoError(t, err)
	cons, err := consumer.New(consumer.Config{
		Conn: conn, Store: st, Exchange: b.exchange, Queues: []string{b.queue}, Consumers: 1, Prefetch: 200,
		BatchSize: 100, Linger: 10 * time.Millisecond, Registerer: prometheus.NewRegistry(), Logger: quiet(), Categories: rules,
	})
	require.NoError(t, err)
	b.runUntilCleanup(t, cons.Run)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return cons.Ready() == nil }, "consumer not ready: %v", cons.Ready())

	b.replays, err = replay.New(replay.Config{Store: st, Conn: conn, Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second, Registerer: prometheus.NewRegistry(), Logger: quiet()})
	require.NoError(t, err)
	b.runUntilCleanup(t, b.replays.Run)
	return b
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runUntilCleanup runs fn until the test ends.
func (b *bundle) runUntilCleanup(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fn(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// dyingQueue declares a classic source queue whose messages expire at
// once and dead-letter to the bundle's exchange: every message published
// to it, a replay included, dies (reason expired).
func (b *bundle) dyingQueue(t *testing.T) string {
	t.Helper()
	name := dlqtest.Name(t, "src")
	_, err := b.ch.QueueDeclare(name, true, false, false, false, amqp.Table{
		"x-queue-type": "classic", "x-dead-letter-exchange": b.exchange, "x-message-ttl": int32(0)})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, b.app, name)
	return name
}

// fail publishes n messages to queue, each failing with the exception
// typ, and returns their ids once dlq stored them.
func (b *bundle) fail(t *testing.T, queue, typ string, n int) []int64 {
	t.Helper()
	for i := range n {
		require.NoError(t, b.ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{
			MessageId: fmt.Sprintf("%s-%d", typ, i), Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), ContentType: "application/json",
			Headers: amqp.Table{"x-exception-type": typ, "x-error-message": "upstream call failed"},
		}))
	}
	var ids []int64
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		ids = b.ids(t, `source_queue = $1 AND failure_type = $2`, queue, typ)
		return len(ids) >= n
	}, "dlq stored %d of %d messages from %s", len(ids), n, queue)
	return ids
}

func (b *bundle) ids(t *testing.T, where string, args ...any) []int64 {
	t.Helper()
	rows, err := b.db.Query(context.Background(), `SELECT id FROM dead_messages WHERE `+where+` ORDER BY id`, args...)
	require.NoError(t, err)
	ids, err := collectIDs(rows)
	require.NoError(t, err)
	return ids
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// cronService runs the policies (and alert) jobs of one instance every
// interval until the test ends (or Stop).
func (b *bundle) cronService(t *testing.T, instance string, reg prometheus.Registerer, interval string, policies ...cron.Policy) *cron.Service {
	t.Helper()
	svc, err := cron.New(cron.Config{
		Store: b.st, Logger: quiet(), Registerer: reg, Instance: instance, LeaseTTL: time.Second,
		Schedules: cron.Only(cron.Schedules{Alerts: interval, Policies: interval}),
		Policies:  cron.PoliciesConfig{Policies: policies},
		Alerts:    cron.AlertsConfig{Rules: alerts.DefaultRuleSet()},
	})
	require.NoError(t, err)
	svc.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	return svc
}

// policyTask is one attempt of a policy as recorded.
type policyTask struct {
	ID        int64
	CreatedAt time.Time
	Status    string
	Items     []int64
}

// policyTasks returns the replay tasks of policy name, oldest first.
func (b *bundle) policyTasks(t *testing.T, name string) []policyTask {
	t.Helper()
	rows, err := b.db.Query(context.Background(), `
SELECT t.id, t.created_at, t.status, array_agg(i.message_id ORDER BY i.message_id)
FROM replay_tasks t JOIN replay_task_items i ON i.task_id = t.id
WHERE t.created_by = $1 AND t.created_via = 'policy'
GROUP BY t.id ORDER BY t.id`, "policy:"+name)
	require.NoError(t, err)
	defer rows.Close()
	var out []policyTask
	for rows.Next() {
		var pt policyTask
		require.NoError(t, rows.Scan(&pt.ID, &pt.CreatedAt, &pt.Status, &pt.Items))
		out = append(out, pt)
	}
	require.NoError(t, rows.Err())
	return out
}

// deaths returns the times message id died, oldest first: its death
// history and its latest death.
func (b *bundle) deaths(t *testing.T, id int64) []time.Time {
	t.Helper()
	var (
		history json.RawMessage
		last    time.Time
	)
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT coalesce(death_history, '[]'::jsonb), failed_at FROM dead_messages WHERE id = $1`, id).Scan(&history, &last))
	var h []struct {
		FailedAt time.Time `json:"failed_at"`
	}
	require.NoError(t, json.Unmarshal(history, &h))
	var out []time.Time
	for _, d := range h {
		out = append(out, d.FailedAt)
	}
	return append(out, last)
}

func (b *bundle) message(t *testing.T, id int64) store.Message {
	t.Helper()
	m, err := b.st.GetMessage(context.Background(), id, nil)
	require.NoError(t, err)
	return m
}
