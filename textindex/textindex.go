// Package textindex writes the documents of text search (q's words,
// docs/API.md) off the ingest path: ingest writes nothing for it; the
// Indexer walks the new rows in id order behind a mark, and takes the
// rows changed after they were stored from text_index_queue, writing
// their documents into message_text in bounded batches (store.IndexText).
//
// Several dlq instances may run an Indexer on one database: a batch
// holds the mark and claims its queue entries FOR UPDATE SKIP LOCKED,
// and moves the mark and deletes the entries in the transaction that
// writes their documents, so no row is indexed twice by two claims and
// none is lost when a process dies mid-batch.
//
// Pacing: while messages keep arriving, or a replay runs, the Indexer
// works a share of the time (Duty, percent): after a batch that took d it
// pauses d*(100-Duty)/Duty, so that on a 2-core machine it leaves ingest
// and replay the database's CPU. The batch's wall time, not the CPU its
// database backend spent (which it counts, store.TextIndexResult's
// DatabaseCPU): on a busy machine a batch waits for a core most of its
// time, so the wall time gives a longer pause, and ingest the core.
// Pacing by the backend's CPU was measured: ingest with text search on
// lost a fifth of its throughput in the rounds of 2026-11-28 15:00 (load
// 3 to 7), and PostgreSQL's CPU per message rose by 14 µs
// (docs/BENCHMARKS.md, History). When nothing new arrived since its last
// batch (the newest message id did not grow) and no replay runs, it
// works without pause until nothing waits; then it looks again every
// Poll.
package textindex

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/store"
)

// Defaults.
const (
	DutyDefault  = 10
	PollDefault  = time.Second
	BatchDefault = store.TextIndexBatchDefault
	// waitingEvery bounds how often the waiting gauge is counted.
	waitingEvery = 5 * time.Second
	// errorPause is the pause after a failed batch.
	errorPause = 5 * time.Second
	// markWait is the pause while new rows wait for the transactions
	// that may still commit ids below them (store.IndexText): an ingest
	// batch takes tens of milliseconds.
	markWait = 50 * time.Millisecond
)

// Store is what the Indexer needs of the store.
type Store interface {
	IndexText(ctx context.Context, max int) (store.TextIndexResult, error)
	TextWaiting(ctx context.Context) (int64, error)
	ReplayRunning(ctx context.Context) (bool, error)
}

// Config configures an Indexer.
type Config struct {
	Store Store
	// Batch is the most rows per transaction. Default BatchDefault.
	Batch int
	// Duty is the share of time (percent, 1-100) it works while messages
	// keep arriving or a replay task is running. Default DutyDefault.
	Duty int
	// Poll is how often it looks for work when the queue is empty.
	// Default PollDefault.
	Poll       time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Indexer writes the documents of the rows waiting for theirs.
type Indexer struct {
	cfg     Config
	log     *slog.Logger
	waiting prometheus.Gauge
	indexed prometheus.Counter
	docs    prometheus.Counter
	errors  prometheus.Counter
	seconds prometheus.Histogram
	dbCPU   prometheus.Counter
}

// New checks cfg and registers the metrics.
func New(cfg Config) (*Indexer, error) {
	if cfg.Store == nil {
		return nil, errors.New("textindex: Config.Store is required")
	}
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.Duty = cmp.Or(cfg.Duty, DutyDefault)
	cfg.Poll = cmp.Or(cfg.Poll, PollDefault)
	if cfg.Duty < 1 || cfg.Duty > 100 {
		return nil, fmt.Errorf("textindex: duty %d must be a percentage from 1 to 100", cfg.Duty)
	}
	if cfg.Batch < 1 {
		return nil, fmt.Errorf("textindex: batch %d must be >= 1", cfg.Batch)
	}
	ix := &Indexer{
		cfg: cfg,
		log: cmp.Or(cfg.Logger, slog.Default()),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dlq_text_index_waiting",
			Help: "Messages waiting for their text search document (counted every few seconds).",
		}),
		indexed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlq_text_index_rows_total",
			Help: "Plain messages the text indexer took: passed by its mark or taken off its queue (deleted ones get no document, sealed ones are not counted).",
		}),
		docs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlq_text_index_documents_total",
			Help: "Text search documents written.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlq_text_index_errors_total",
			Help: "Text index batches that failed (retried after a pause).",
		}),
		dbCPU: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlq_text_index_database_cpu_seconds_total",
			Help: "CPU time PostgreSQL's backend spent on text index batches (counted when the database runs on this machine).",
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dlq_text_index_batch_seconds",
			Help:    "Time one text index batch took.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{ix.waiting, ix.indexed, ix.docs, ix.errors, ix.seconds, ix.dbCPU} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("textindex: register metrics: %w", err)
			}
		}
	}
	return ix, nil
}

// Once runs one batch: at most Batch waiting rows get their documents.
func (ix *Indexer) Once(ctx context.Context) (store.TextIndexResult, error) {
	start := time.Now()
	res, err := ix.cfg.Store.IndexText(ctx, ix.cfg.Batch)
	if err != nil {
		if ctx.Err() == nil {
			// A batch cut short by shutdown is no failure: it rolls
			// back and its rows stay queued.
			ix.errors.Inc()
		}
		return res, err
	}
	if res.Rows > 0 {
		ix.seconds.Observe(time.Since(start).Seconds())
	}
	ix.indexed.Add(float64(res.Rows))
	ix.docs.Add(float64(res.Documents))
	ix.dbCPU.Add(res.DatabaseCPU.Seconds())
	return res, nil
}

// Run indexes until ctx ends, then returns nil; a batch cut short by the
// end rolls back and its rows stay queued for the next start.
func (ix *Indexer) Run(ctx context.Context) error {
	var (
		newest  int64
		counted time.Time
	)
	for {
		if time.Since(counted) >= waitingEvery {
			if n, err := ix.cfg.Store.TextWaiting(ctx); err == nil {
				ix.waiting.Set(float64(n))
			}
			counted = time.Now()
		}
		start := time.Now()
		res, err := ix.Once(ctx)
		took := time.Since(start)
		var pause time.Duration
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			ix.log.Warn("text index batch failed; retrying", "error", err, "pause", errorPause)
			pause = errorPause
		case res.Rows == 0 && !res.More:
			pause = ix.cfg.Poll
		case res.Rows == 0:
			// Rows wait above the mark for transactions that may still
			// commit ids below them: a moment, not a poll.
			pause = min(ix.cfg.Poll, markWait)
		case res.Newest > newest:
			// New rows arrived since the last batch: ingest is busy.
			newest = res.Newest
			pause = ix.dutyPause(took)
		case ix.replaying(ctx):
			// A replay publishes now: catching up at full speed would
			// take its share of the machine (end to end, a classic replay
			// right after a burst fell from 0.90 to 0.71 of raw).
			pause = ix.dutyPause(took)
		}
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// dutyPause is the pause after a batch that took took, so that the
// Indexer works Duty percent of the time.
func (ix *Indexer) dutyPause(took time.Duration) time.Duration {
	return took * time.Duration(100-ix.cfg.Duty) / time.Duration(ix.cfg.Duty)
}

// replaying reports whether a replay runs; an error reads as none (the
// batch that follows reports a broken database).
func (ix *Indexer) replaying(ctx context.Context) bool {
	running, err := ix.cfg.Store.ReplayRunning(ctx)
	return err == nil && running
}
