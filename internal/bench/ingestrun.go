package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/store"
)

// ingestRun measures one drain: a fresh schema and queue, n dead letters
// published to the exchange before any consumer runs, then the clock runs
// from starting the consumer until the last of them is committed.
func ingestRun(o ingestOptions, bin string, size, run int, encrypted bool) (ingestResult, error) {
	ctx := context.Background()
	r := ingestResult{
		Bench: "ingest", Mode: o.mode, QueueType: o.queueType, DeadLetter: o.deadLetter, Size: size, N: o.n, Run: run,
		Consumers: o.ingest.Consumers, Prefetch: o.ingest.Prefetch, BatchSize: o.ingest.BatchSize, Linger: o.ingest.Linger.D().String(),
		Encrypted: encrypted, TextSearch: o.ingest.TextSearch, WithoutIndexes: o.withoutIndexes,
	}
	env := &ingestEnv{suffix: randomHex(4)}
	defer env.undo.run()
	if err := env.setUp(ctx, o, encrypted); err != nil {
		return r, err
	}
	secs, err := env.prefill(ctx, o, size)
	if err != nil {
		return r, err
	}
	r.PrefillSecs = secs
	if err := env.measureDrain(ctx, o, bin, size, run, &r); err != nil {
		return r, err
	}
	return r, env.checkDrained(ctx, o)
}

// ingestEnv is one drain's schema, store and queue, and what undoes them.
type ingestEnv struct {
	suffix, schema, dsn, exchange, queue string
	// keyEntry is the DLQ_ENCRYPTION_KEYS entry of a sealing run ("": none).
	keyEntry string
	st       *store.Store
	conn     *amqp.Connection
	undo     undoStack
}

// setUp makes the schema, migrated (with -without-index's indexes
// dropped), and dlq's exchange and queue, declared as dlq declares them.
func (e *ingestEnv) setUp(ctx context.Context, o ingestOptions, encrypted bool) error {
	e.schema = "bench_ingest_" + e.suffix
	e.exchange = "bench.ingest.dlx." + e.suffix
	e.queue = "bench.ingest.dlq." + e.suffix
	// Encryption on: a random key, every header sealed, as dlq serve
	// runs with DLQ_ENCRYPTION_KEYS alone.
	var sealing *store.Encryption
	if encrypted {
		entry, ring, err := benchKey()
		if err != nil {
			return err
		}
		e.keyEntry, sealing = entry, &store.Encryption{Ring: ring}
	}

	admin, err := store.OpenBenchAdmin(ctx, o.pgURL)
	if err != nil {
		return fmt.Errorf("%w (does database bench exist? `make bench-limits` creates it)", err)
	}
	e.undo.push(func() { admin.Close(context.Background()) })
	if err := admin.CreateSchema(ctx, e.schema); err != nil {
		return err
	}
	if e.dsn, err = withSearchPath(o.pgURL, e.schema+",public"); err != nil {
		return err
	}
	maxConns := int32(4 + 2*o.ingest.Consumers)
	e.st, err = store.Open(ctx, store.Config{DatabaseURL: e.dsn, MaxConns: maxConns + 1, Encryption: sealing, TextSearch: o.ingest.TextSearch})
	if err != nil {
		return err
	}
	e.undo.push(e.st.Close)
	if _, err := e.st.Migrate(ctx, nil); err != nil {
		return err
	}
	if err := e.st.PrepareSealing(ctx); err != nil {
		return err
	}
	for _, ix := range o.withoutIndexes {
		if err := e.st.Bench().DropIndex(ctx, e.schema, ix); err != nil {
			return fmt.Errorf("-without-index %s: %w", ix, err)
		}
	}

	if e.conn, _, err = dialDLQ(o.amqpURL, e.exchange, e.queue, o.queueType); err != nil {
		return err
	}
	e.undo.push(func() { _ = e.conn.Close() })
	if !o.keep {
		e.undo.push(func() {
			if c, err := e.conn.Channel(); err == nil {
				_, _ = c.QueueDelete(e.queue, false, false, false)
				_ = c.ExchangeDelete(e.exchange, false, false)
				_ = c.Close()
			}
			_ = admin.DropSchema(context.Background(), e.schema)
		})
	}
	return nil
}

// prefill puts n dead letters of size bytes into dlq's queue, as
// -dead-letter says, waits until the queue holds them all, and lets the
// database settle after the burst; it returns how long that took (not
// part of the drain's clock).
func (e *ingestEnv) prefill(ctx context.Context, o ingestOptions, size int) (float64, error) {
	t0 := time.Now()
	target, key := e.exchange, "orders.created"
	stopRejecting := func() error { return nil }
	if o.deadLetter == "reject" || o.deadLetter == "ttl" {
		source := "bench.ingest.src." + e.suffix
		srcArgs := amqp.Table{"x-queue-type": "classic", "x-dead-letter-exchange": e.exchange}
		if o.deadLetter == "ttl" {
			srcArgs["x-message-ttl"] = int32(0)
		}
		ch, err := e.conn.Channel()
		if err != nil {
			return 0, err
		}
		if _, err := ch.QueueDeclare(source, true, false, false, false, srcArgs); err != nil {
			return 0, fmt.Errorf("declare source queue %s: %w", source, err)
		}
		_ = ch.Close()
		e.undo.push(func() {
			if c, err := e.conn.Channel(); err == nil {
				_, _ = c.QueueDelete(source, false, false, false)
				_ = c.Close()
			}
		})
		target, key = "", source
		if o.deadLetter == "reject" {
			if stopRejecting, err = rejectAll(e.conn, source); err != nil {
				return 0, err
			}
		}
	}
	var err error
	if o.deadLetter == "limits" {
		err = prefillLimitsShape(ctx, e.conn, target, key, o.n, size)
	} else {
		err = prefillQueues(ctx, e.conn, target, key, o.deadLetter == "direct", o.n, size, e.suffix, 1, o.textBodies)
	}
	if err != nil {
		return 0, fmt.Errorf("prefill: %w", err)
	}
	if err := waitReady(e.conn, e.queue, o.n, 5*time.Minute); err != nil {
		return 0, err
	}
	if err := stopRejecting(); err != nil {
		return 0, err
	}
	secs := time.Since(t0).Seconds()
	// Let the broker and the database settle after the burst.
	return secs, e.st.Bench().Checkpoint(ctx)
}

// measureDrain runs the drain, in this process or as dlq serve (-mode),
// and fills r with its clock, CPU by program, WAL, peak RSS and, with
// text search on, how soon a search finds the newest message.
func (e *ingestEnv) measureDrain(ctx context.Context, o ingestOptions, bin string, size, run int, r *ingestResult) error {
	// A drain returns once everything is committed, with dlq still running
	// (its database backends still alive for the CPU count); stop then
	// shuts it down gracefully.
	var drain func() (dlqCPU, peakRSS float64, subscribed time.Time, stop func() error, err error)
	reg := prometheus.NewRegistry()
	switch o.mode {
	case "inproc":
		drain = func() (float64, float64, time.Time, func() error, error) {
			cpu, rss, stop, err := drainInProcess(o, e.st, reg, e.exchange, e.queue, size, run)
			return cpu, rss, time.Time{}, stop, err
		}
	default:
		drain = func() (float64, float64, time.Time, func() error, error) {
			return drainProcess(o, bin, e.dsn, e.exchange, e.queue, e.suffix, e.keyEntry, e.st, e.conn)
		}
	}
	r.Load1 = loadAvg()
	wal0, err := e.st.Bench().WALPosition(ctx)
	if err != nil {
		return err
	}
	c0 := o.cpu.take()
	start := time.Now()
	dlqCPU, peak, subscribed, stop, err := drain()
	if err != nil {
		return err
	}
	r.Secs = time.Since(start).Seconds()
	if !subscribed.IsZero() {
		r.StartupSecs = subscribed.Sub(start).Seconds()
		r.MsgsSecSubscribed = float64(o.n) / (r.Secs - r.StartupSecs)
	}
	c1 := o.cpu.take()
	wal1, err := e.st.Bench().WALPosition(ctx)
	if err != nil {
		_ = stop()
		return err
	}
	r.WALBytesPerMsg = float64(wal1-wal0) / float64(o.n)
	// Not while profiling: the profiles end when dlq stops, and would
	// hold the indexer's catching up after the drain.
	if r.TextSearch && !r.Encrypted && o.cpuProfile == "" && o.memProfile == "" && o.pgProfile == "" {
		if r.SearchNewestSecs, r.TextCaughtUpSecs, err = searchNewest(e.st, o.textBodies, newestNeedle(e.suffix)); err != nil {
			_ = stop()
			return err
		}
	}
	if err := stop(); err != nil {
		return err
	}
	if o.mode == "inproc" {
		secs, batches := histogram(reg, "dlq_ingest_batch_seconds")
		msgs, _ := histogram(reg, "dlq_ingest_batch_messages")
		if batches > 0 {
			r.BatchMs, r.BatchMsgs = secs/float64(batches)*1000, msgs/float64(batches)
		}
	}
	r.MsgsSec = float64(o.n) / r.Secs
	r.MBSec = float64(o.n) * float64(size) / 1e6 / r.Secs
	r.CPUDlq = dlqCPU / r.Secs * 100
	rmq, pg := c1.since(c0)
	r.CPURabbit = rmq / r.Secs * 100
	r.CPUPg = pg / r.Secs * 100
	r.PeakRSSMB = peak
	r.UsPerMsgDlq = usPerMsg(r.CPUDlq, r.Secs, r.N)
	r.UsPerMsgPg = usPerMsg(r.CPUPg, r.Secs, r.N)
	r.UsPerMsgRabbit = usPerMsg(r.CPURabbit, r.Secs, r.N)
	r.UsPerMsgTotal = r.UsPerMsgDlq + r.UsPerMsgPg + r.UsPerMsgRabbit
	return nil
}

// checkDrained checks the outcome: exactly n rows, nothing left in the
// queue, ready or unacknowledged (no consumer is attached any more).
func (e *ingestEnv) checkDrained(ctx context.Context, o ingestOptions) error {
	rows, err := e.st.Bench().CountMessages(ctx)
	if err != nil {
		return err
	}
	if rows != int64(o.n) {
		return fmt.Errorf("stored %d rows for %d dead letters", rows, o.n)
	}
	q, err := passive(e.conn, e.queue)
	if err != nil {
		return err
	}
	if q.Messages != 0 || q.Consumers != 0 {
		return fmt.Errorf("queue %s after the drain: %d ready, %d consumers", e.queue, q.Messages, q.Consumers)
	}
	return nil
}
