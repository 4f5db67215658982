package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/store"
)

// Ingester is the part of the store the consumer writes through.
type Ingester interface {
	// IngestBatch writes a batch in one transaction; nil means committed.
	IngestBatch(ctx context.Context, b store.IngestBatch) (store.IngestResult, error)
	// CommittedRows reports whether an attempt of batch id committed, and
	// how many of its messages became new rows.
	CommittedRows(ctx context.Context, id int64) (rows int, ok bool, err error)
	// ConfirmBatches forgets batches whose acks reached the broker.
	ConfirmBatches(ctx context.Context, ids []int64) error
}

// Defaults of Config. config.Default writes the same values (config may
// not import consumer); a test in config holds them equal.
const (
	// ConsumersDefault: three writers keep PostgreSQL busy while another
	// batch's commit waits for its WAL flush: in same-run rounds on
	// 2026-11-29, a backlog of a million drained at 1.01 of the raw
	// pipeline against 0.93 with two (docs/BENCHMARKS.md).
	ConsumersDefault  = 3
	PrefetchDefault   = 1000
	BatchSizeDefault  = 500
	BatchBytesDefault = 32 << 20
	LingerDefault     = 50 * time.Millisecond
)

// Config configures a Consumer.
type Config struct {
	// Conn is the program's RabbitMQ connection. Required.
	Conn *broker.Conn
	// Store receives the batches. Required.
	Store Ingester
	// Exchange is the dead-letter exchange, used to re-declare a queue that
	// was deleted under us. Required.
	Exchange string
	// Queues are dlq's dead-letter queues. Required.
	Queues []string
	// Consumers per queue. Optional; default ConsumersDefault.
	Consumers int
	// Prefetch bounds unacknowledged deliveries per consumer. Optional;
	// default PrefetchDefault.
	Prefetch int
	// BatchSize is the most messages per transaction. Optional; default
	// BatchSizeDefault.
	BatchSize int
	// BatchBytes is the most body bytes per transaction, so large bodies do
	// not pile up in memory. Optional; default BatchBytesDefault.
	BatchBytes int
	// Linger is how long a partial batch waits for more. Optional; default
	// LingerDefault.
	Linger time.Duration
	// ShutdownTimeout bounds committing in-flight batches at shutdown.
	// Optional; default 30s.
	ShutdownTimeout time.Duration
	// Name identifies this process in consumer tags and ingest_inflight.
	// Optional; default host-pid-random: a container restarted in place
	// keeps its hostname and runs as pid 1 again, and with the same name
	// it took its predecessor's unconfirmed batches for its own, which
	// the cleanup of stale batches then never deleted.
	Name string
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the ingest metrics. Optional.
	Registerer prometheus.Registerer
	// Up is set to 1 while every consumer is subscribed and writing, 0
	// otherwise (dlq_up{component="consumer"}). Optional.
	Up prometheus.Gauge
	// Now is the clock. Optional; default time.Now.
	Now func() time.Time
	// Categories are the failure category rules applied to every message
	// (Categorize). Optional: without them every message is unknown.
	Categories *category.Rules
}

func (c *Config) setDefaults() {
	c.Consumers = cmp.Or(c.Consumers, ConsumersDefault)
	c.Prefetch = cmp.Or(c.Prefetch, PrefetchDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.BatchBytes = cmp.Or(c.BatchBytes, BatchBytesDefault)
	c.Linger = cmp.Or(c.Linger, LingerDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 30*time.Second)
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("%s-%d-%08x", cmp.Or(host, "dlq"), os.Getpid(), rand.Uint32())
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	switch {
	case c.Conn == nil:
		return errors.New("consumer: Conn is required")
	case c.Store == nil:
		return errors.New("consumer: Store is required")
	case c.Exchange == "":
		return errors.New("consumer: Exchange is required")
	case len(c.Queues) == 0:
		return errors.New("consumer: Queues must name at least one queue")
	case c.BatchSize > c.Prefetch:
		return fmt.Errorf("consumer: BatchSize %d exceeds Prefetch %d: a batch could never fill", c.BatchSize, c.Prefetch)
	}
	return nil
}

// Consumer ingests dead messages from dlq's queues.
type Consumer struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	upMu sync.Mutex // serialises updateUp

	mu      sync.Mutex
	workers []*worker
	// gates are the shutdown waits per queue (settle.go), set before the
	// workers cancel their subscriptions.
	gates map[string]*settleGate
	// workingSince is when every consumer was last seen subscribed and
	// writing after it was not; zero while that is not so.
	workingSince time.Time
}

// New validates cfg and registers the metrics.
func New(cfg Config) (*Consumer, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, log: cfg.Logger.With("component", "consumer"), metrics: m}, nil
}

// Run consumes until ctx ends, then finishes the batches in flight (see the
// package doc) and returns. It returns nil after a clean shutdown.
func (c *Consumer) Run(ctx context.Context) error {
	// The workers stop only after the queues' consumer counts are noted,
	// so that each can tell when RabbitMQ has applied its last
	// acknowledgements (settle.go).
	wctx, stopWorkers := context.WithCancel(context.Background())
	defer stopWorkers()
	go func() {
		select {
		case <-ctx.Done():
			c.noteConsumers()
		case <-wctx.Done():
		}
		stopWorkers()
	}()
	// Every delivery to these consumers goes through convert, which reads
	// a header table delivered as bytes: amqp091-go need not decode it.
	c.cfg.Conn.DeliverRawHeaders(c.tagPrefix())
	var wg sync.WaitGroup
	for _, q := range c.cfg.Queues {
		for i := range c.cfg.Consumers {
			w := &worker{c: c, queue: q, tag: c.tag(q, i)}
			c.mu.Lock()
			c.workers = append(c.workers, w)
			c.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.run(wctx)
			}()
		}
	}
	wg.Wait()
	return nil
}

// tag is the consumer tag of consumer i of queue, also written to
// ingest_inflight with every batch it commits.
func (c *Consumer) tag(queue string, i int) string {
	return fmt.Sprintf("%s%s-%d", c.tagPrefix(), queue, i)
}

// tagPrefix starts the tag of every consumer of c.
func (c *Consumer) tagPrefix() string { return "dlq-" + c.cfg.Name + "-" }

// ConsumerTags returns the tags of this process's consumers, as
// ingest_inflight.consumer names them.
func (c *Consumer) ConsumerTags() []string {
	var tags []string
	for _, q := range c.cfg.Queues {
		for i := range c.cfg.Consumers {
			tags = append(tags, c.tag(q, i))
		}
	}
	return tags
}

// WorkingSince returns since when every consumer has been subscribed and
// writing without interruption, or zero if they are not now. The cleanup
// of stale ingest_inflight rows waits on it (see package store, "Stale
// ingest batches").
func (c *Consumer) WorkingSince() time.Time {
	// A worker marks itself subscribed before it recomputes this, so in
	// between Ready could say yes while the recorded time is still zero:
	// recompute on read, and the two agree whenever they are asked.
	c.updateUp()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workingSince
}

// updateUp recomputes the Up gauge and WorkingSince after a worker's state
// changed.
func (c *Consumer) updateUp() {
	// One at a time, so that a stale reading never overwrites a newer one.
	c.upMu.Lock()
	defer c.upMu.Unlock()
	ok := c.Ready() == nil
	c.mu.Lock()
	switch {
	case !ok:
		c.workingSince = time.Time{}
	case c.workingSince.IsZero():
		c.workingSince = c.cfg.Now()
	}
	c.mu.Unlock()
	if c.cfg.Up == nil {
		return
	}
	if ok {
		c.cfg.Up.Set(1)
	} else {
		c.cfg.Up.Set(0)
	}
}

// Ready returns nil when every consumer is subscribed and its last write
// succeeded; otherwise an error saying which is not and why.
func (c *Consumer) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.workers) == 0 {
		return errors.New("consumers not started")
	}
	var errs []error
	for _, w := range c.workers {
		if err := w.health(); err != nil {
			errs = append(errs, fmt.Errorf("consumer %s: %w", w.tag, err))
		}
	}
	return errors.Join(errs...)
}
