package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// faultyStore is the real store with two faults a test can arm: hold
// makes IngestBatch keep a batch it committed (the writer never gets to
// acknowledge it) until released; lose makes the next IngestBatch report
// an error although its transaction committed, as when the connection dies
// during COMMIT.
type faultyStore struct {
	*store.Store
	mu      sync.Mutex
	hold    chan struct{} // closed to release
	held    chan struct{} // closed once a committed batch is held
	heldSet bool
	lose    bool
	lost    int
}

func (f *faultyStore) IngestBatch(ctx context.Context, b store.IngestBatch) (store.IngestResult, error) {
	res, err := f.Store.IngestBatch(ctx, b)
	f.mu.Lock()
	hold, lose := f.hold, f.lose && err == nil
	if lose {
		f.lose = false
		f.lost++
	}
	if hold != nil && err == nil && !f.heldSet {
		f.heldSet = true
		close(f.held)
	}
	f.mu.Unlock()
	if hold != nil && err == nil {
		<-hold
	}
	if lose {
		return store.IngestResult{}, fmt.Errorf("test: connection lost during COMMIT of batch %d", b.ID)
	}
	return res, err
}

// pipeline is one consumer of queue writing through a store, with its own
// registry served at /metrics.
type pipeline struct {
	conn    *broker.Conn
	reg     *prometheus.Registry
	metrics *httptest.Server
	stop    func()
	ready   func() error
}

// ownPipelineFixture is a test's own schema (its store and a pool on it),
// a broker connection and a channel of the test's, and dlq's exchange and
// queue, declared as dlq declares them.
func ownPipelineFixture(t *testing.T) (*store.Store, *pgxpool.Pool, *amqp.Connection, *amqp.Channel, string, string) {
	t.Helper()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	exchange, queue := dlqtest.Name(t, "dlx"), dlqtest.Name(t, "dlq")
	declareOwn(t, app, nil, exchange, queue)
	return st, db, app, ch, exchange, queue
}

func startPipeline(t *testing.T, fs consumer.Ingester, exchange, queue string, batch, prefetch int, linger time.Duration) *pipeline {
	t.Helper()
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: dlqtest.Name(t, "metrics")})
	require.NoError(t, err)
	p := &pipeline{conn: conn, reg: prometheus.NewRegistry()}
	cons, err := consumer.New(consumer.Config{
		Conn: conn, Store: fs, Exchange: exchange, Queues: []string{queue},
		Consumers: 1, Prefetch: prefetch, BatchSize: batch, Linger: linger, Registerer: p.reg,
	})
	require.NoError(t, err)
	p.ready = cons.Ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	p.metrics = httptest.NewServer(promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done, "Run returns nil after a clean stop")
			conn.Close()
			p.metrics.Close()
		})
	}
	t.Cleanup(p.stop)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return cons.Ready() == nil }, "consumer not ready: %v", cons.Ready())
	return p
}

// scrape reads /metrics and returns every sample by its full name with
// labels, as written (e.g. `dlq_messages_duplicate_total`).
func (p *pipeline) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(p.metrics.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

func publishDead(t *testing.T, ch *amqp.Channel, exchange, tag string, n int) {
	t.Helper()
	require.NoError(t, ch.Confirm(false))
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, "orders.created", false, false, amqp.Publishing{
			MessageId: fmt.Sprintf("%s-%d", tag, i),
			Body:      fmt.Appendf(nil, "%s body %d", tag, i),
			Headers: amqp.Table{"x-death": []any{amqp.Table{
				"count": int64(1), "reason": "rejected", "queue": "orders.work", "exchange": "orders",
				"routing-keys": []any{"orders.created"}, "time": time.Now().UTC().Truncate(time.Second),
			}}},
		})
		require.NoError(t, err)
		ok, err := dc.WaitContext(context.Background())
		require.NoError(t, err)
		require.True(t, ok)
	}
}

// TestIngestMetrics reads /metrics after a known number of dead letters,
// ten of them delivered twice: a first consumer commits a batch of ten and
// loses its connection before acknowledging it, so RabbitMQ delivers the
// ten again to a second consumer, which also learns of its first commit
// only afterwards (the COMMIT's answer lost), and then five new ones. The
// second consumer must count ten duplicates and five stored, never the
// duplicates as stored, and the store must hold fifteen rows.
func TestIngestMetrics(t *testing.T) {
	t.Parallel()
	st, db, app, ch, exchange, queue := ownPipelineFixture(t)

	// First consumer: one full batch of ten, committed, never acknowledged.
	publishDead(t, ch, exchange, "first", 10)
	first := &faultyStore{Store: st, hold: make(chan struct{}), held: make(chan struct{})}
	a := startPipeline(t, first, exchange, queue, 10, 20, 5*time.Second)
	select {
	case <-first.held:
	case <-time.After(20 * time.Second):
		t.Fatal("the first consumer never committed its batch")
	}
	rows := func() int {
		var n int
		require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages`).Scan(&n))
		return n
	}
	require.Equal(t, 10, rows())
	a.conn.Close() // its channel goes; RabbitMQ takes the ten back
	close(first.hold)
	stored := fmt.Sprintf(`dlq_messages_ingested_total{queue="%s",reason="rejected",source_queue="orders.work"}`, queue)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return a.scrape(t)[stored] == 10 },
		"the first consumer counts the ten it committed: %v", a.scrape(t)[stored])
	require.Zero(t, a.scrape(t)["dlq_messages_duplicate_total"])
	a.stop()

	// Second consumer: the ten again, its first commit reported as failed.
	second := &faultyStore{Store: st, lose: true}
	b := startPipeline(t, second, exchange, queue, 100, 200, 20*time.Millisecond)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return b.scrape(t)["dlq_messages_duplicate_total"] == 10 },
		"duplicates counted: %v", b.scrape(t)["dlq_messages_duplicate_total"])
	publishDead(t, ch, exchange, "second", 5)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return b.scrape(t)[stored] == 5 },
		"stored counted: %v", b.scrape(t)[stored])
	got := b.scrape(t)
	b.stop()

	second.mu.Lock()
	require.Equal(t, 1, second.lost, "the lost COMMIT answer was injected")
	second.mu.Unlock()
	require.Equal(t, float64(10), got["dlq_messages_duplicate_total"], "redeliveries are duplicates")
	var ingested float64
	for k, v := range got {
		if strings.HasPrefix(k, "dlq_messages_ingested_total{") {
			ingested += v
		}
	}
	require.Equal(t, float64(5), ingested, "only the five new messages are stored, under one label set")
	require.Equal(t, float64(15), got["dlq_ingest_batch_messages_sum"], "every delivery went through a batch")
	require.GreaterOrEqual(t, got["dlq_ingest_batch_messages_count"], float64(2), "at least the redeliveries' batch and the new one")
	require.Equal(t, got["dlq_ingest_batch_messages_count"], got["dlq_ingest_batch_seconds_count"], "one timing per batch")
	require.Zero(t, got["dlq_ingest_write_errors_total"], "a commit found after the fact is no write error")
	require.Zero(t, got["dlq_ingest_data_errors_total"])
	require.Equal(t, 15, rows(), "ten first deliveries and five new messages; the redeliveries are no rows")
	require.Zero(t, dlqtest.QueueDepth(t, app, queue), "every delivery acknowledged")
}
