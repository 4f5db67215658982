package cron

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

// Backfills job defaults.
const (
	BackfillsBudgetDefault = 40 * time.Second
	BackfillsBatchDefault  = 1000
	// BackfillsDutyDefault is the share of a run's time spent in batches:
	// after a batch that took d the job rests d*(1-duty)/duty, so that a
	// backfill over millions of rows leaves the database to ingest and
	// the API most of the time.
	BackfillsDutyDefault = 0.5
)

// BackfillsConfig configures the backfills job.
type BackfillsConfig struct {
	// Rules are the failure category rules ingest applies; the backfill
	// older_rows categorises the rows it does with them. Optional: nil
	// leaves their categories as stored.
	Rules *category.Rules
	// Budget is roughly how long one run may spend before it saves its
	// place for the next tick. Optional, default BackfillsBudgetDefault.
	Budget time.Duration
	// Batch is the rows per transaction. Optional, default
	// BackfillsBatchDefault.
	Batch int
	// Duty is the share of a run spent working (0 < Duty <= 1).
	// Optional, default BackfillsDutyDefault.
	Duty float64
}

func (c *BackfillsConfig) setDefaults() {
	c.Budget = cmp.Or(c.Budget, BackfillsBudgetDefault)
	c.Batch = cmp.Or(c.Batch, BackfillsBatchDefault)
	c.Duty = cmp.Or(c.Duty, BackfillsDutyDefault)
}

func (c *BackfillsConfig) validate() error {
	if c.Duty <= 0 || c.Duty > 1 {
		return fmt.Errorf("field Duty must be in (0, 1], got %g", c.Duty)
	}
	if c.Batch < 1 {
		return fmt.Errorf("field Batch must be >= 1, got %d", c.Batch)
	}
	return nil
}

// backfill is one backfill the job runs (store/backfill.go): how many
// rows need it now, and one batch of it after an id.
type backfill struct {
	name    string
	pending func(ctx context.Context) (int64, error)
	batch   func(ctx context.Context, l store.Lease, after int64, limit int) (store.BackfillBatch, error)
}

// backfillsJob runs the backfills (store/backfill.go): work over existing
// rows that migrations leave to it. Each tick it looks at each backfill
// in turn: a pass in progress goes on from its saved place; otherwise,
// if rows need the backfill, a pass over them starts. A pass works by id,
// a batch per transaction, fenced by the job's lease and saving its place
// after each batch, until Budget is spent or it has nothing left after
// its place (then it ends, and the next tick starts another if rows came
// meanwhile: an older dlq stores such rows during a rolling upgrade).
// Progress shows in dlq migrate --status, in dlq_backfill_rows_total
// (this instance's rows) and dlq_backfill_remaining (read on scrape).
type backfillsJob struct {
	st        *store.Store
	backfills []backfill
	budget    time.Duration
	batch     int
	duty      float64
	rows      *prometheus.CounterVec
}

func newBackfillsJob(st *store.Store, reg prometheus.Registerer, cfg BackfillsConfig) (*backfillsJob, error) {
	rows, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_backfill_rows_total",
		Help: "Rows the backfills (work over existing rows left by migrations) have done on this instance, by backfill.",
	}, []string{"backfill"}))
	if err != nil {
		return nil, err
	}
	for _, name := range store.Backfills() {
		rows.WithLabelValues(name)
	}
	rules := cfg.Rules
	var categorize func(store.CategoryInput) string
	if rules != nil {
		withHeaders := rules.NeedsHeaders()
		categorize = func(in store.CategoryInput) string {
			f := category.Fields{SourceQueue: in.SourceQueue, Reason: in.Reason, FailureType: in.FailureType, FailureMessage: in.FailureMessage}
			if withHeaders {
				f.Header = category.HeadersJSON(in.Headers)
			}
			return rules.Of(f)
		}
	}
	older := backfill{
		name:    store.BackfillOlderRows,
		pending: st.OlderRowsPending,
		batch: func(ctx context.Context, l store.Lease, after int64, limit int) (store.BackfillBatch, error) {
			return st.BackfillOlderRows(ctx, l, after, limit, rules != nil && rules.NeedsHeaders(), categorize)
		},
	}
	return &backfillsJob{st: st, backfills: []backfill{older}, budget: cfg.Budget, batch: cfg.Batch, duty: cfg.Duty, rows: rows}, nil
}

func (j *backfillsJob) run(ctx context.Context, r *Run) (int64, error) {
	states, err := j.st.ReadBackfills(ctx)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	var total int64
	for _, b := range j.backfills {
		var state store.BackfillState
		for _, s := range states {
			if s.Name == b.name {
				state = s
			}
		}
		n, err := j.runOne(ctx, r, b, state, began)
		total += n
		if err != nil || time.Since(began) >= j.budget {
			return total, err
		}
	}
	return total, nil
}

// runOne goes on with backfill b's pass, or starts one if rows need it,
// until the run's budget is spent or the pass ends.
func (j *backfillsJob) runOne(ctx context.Context, r *Run, b backfill, state store.BackfillState, began time.Time) (int64, error) {
	log := r.Logger.With("backfill", b.name)
	if !state.Running() {
		pending, err := b.pending(ctx)
		if err != nil || pending == 0 {
			return 0, err
		}
		if state, err = j.st.StartBackfillPass(ctx, r.Lease, b.name, pending); err != nil {
			return 0, err
		}
		log.Info("backfill pass started", "rows", pending)
	}
	cursor := state.Cursor
	var done int64
	for {
		t := time.Now()
		res, err := b.batch(ctx, r.Lease, cursor, j.batch)
		if err != nil {
			return done, err
		}
		finished := res.Last == 0
		if !finished {
			cursor = res.Last
		}
		if err := j.st.SaveBackfillPass(ctx, r.Lease, b.name, cursor, res.Rows, finished); err != nil {
			return done, err
		}
		done += res.Rows
		j.rows.WithLabelValues(b.name).Add(float64(res.Rows))
		if finished {
			log.Info("backfill pass finished", "rows", state.Done+done, "took", time.Since(*state.StartedAt).Round(time.Second))
			return done, nil
		}
		if time.Since(began) >= j.budget {
			log.Debug("backfill pass continues next tick", "cursor", cursor, "done", state.Done+done, "of", state.Total)
			return done, nil
		}
		if err := rest(ctx, time.Since(t), j.duty); err != nil {
			return done, err
		}
	}
}

// rest waits after a batch that took d so that work is duty of the time.
func rest(ctx context.Context, d time.Duration, duty float64) error {
	if duty >= 1 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(float64(d) * (1 - duty) / duty)):
		return nil
	}
}

// backfillCollector exports dlq_backfill_remaining on scrape, from the
// backfills table: the same on every instance, whichever runs the job.
type backfillCollector struct {
	st        *store.Store
	log       *slog.Logger
	remaining *prometheus.Desc
}

func newBackfillCollector(st *store.Store, log *slog.Logger) *backfillCollector {
	return &backfillCollector{st: st, log: log, remaining: prometheus.NewDesc("dlq_backfill_remaining",
		"Rows the backfill's pass in progress has still to do (work over existing rows left by migrations; 0 when no pass runs), by backfill.",
		[]string{"backfill"}, nil)}
}

func (c *backfillCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.remaining }

func (c *backfillCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	states, err := c.st.ReadBackfills(ctx)
	if err != nil {
		c.log.Warn("cannot read backfill progress for metrics", "error", err)
		return
	}
	for _, s := range states {
		ch <- prometheus.MustNewConstMetric(c.remaining, prometheus.GaugeValue, float64(s.Remaining()), s.Name)
	}
}
