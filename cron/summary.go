package cron

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

// Summary job defaults.
const (
	ReconcileIntervalDefault = time.Hour
	ReconcileBudgetDefault   = 20 * time.Second
	ReconcileChunkDefault    = 10000
)

// SummaryConfig tunes the summary job.
type SummaryConfig struct {
	// ReconcileInterval is the time between the end of one full
	// reconciliation pass and the start of the next. Optional, default
	// ReconcileIntervalDefault.
	ReconcileInterval time.Duration
	// Budget is roughly how long one run may spend reconciling before it
	// saves its place for the next tick. Optional, default
	// ReconcileBudgetDefault.
	Budget time.Duration
	// Chunk is the rows counted per statement. Optional, default
	// ReconcileChunkDefault.
	Chunk int
}

func (c *SummaryConfig) setDefaults() {
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, ReconcileIntervalDefault)
	c.Budget = cmp.Or(c.Budget, ReconcileBudgetDefault)
	c.Chunk = cmp.Or(c.Chunk, ReconcileChunkDefault)
}

// summaryJob keeps queue_summary honest. Writers maintain it in their own
// transactions, so it is exact unless some code path forgot to; this job
// proves that, and repairs what it finds:
//
//   - Bootstrap: until one full pass has completed (summary_state), or
//     whenever the summary is found empty while messages are stored, a pass
//     starts at once.
//   - Reconciliation: a pass recounts every source queue (store
//     ReconcileQueue: one snapshot per queue, counted in bounded chunks,
//     drift applied as an increment) and starts again ReconcileInterval
//     after the last one finished. A pass spreads over as many ticks as
//     it needs: each run stops after the queue that exceeds Budget and
//     saves its place, so the next run (on whichever instance) goes on.
type summaryJob struct {
	st      *store.Store
	repairs prometheus.Counter
	every   time.Duration
	budget  time.Duration
	chunk   int
}

func newSummaryJob(st *store.Store, reg prometheus.Registerer, cfg SummaryConfig) (*summaryJob, error) {
	repairs, err := promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dlq_summary_repairs_total",
		Help: "queue_summary entries (source queue, status) found wrong by reconciliation and corrected.",
	}))
	if err != nil {
		return nil, err
	}
	return &summaryJob{st: st, repairs: repairs, every: cfg.ReconcileInterval, budget: cfg.Budget, chunk: cfg.Chunk}, nil
}

func (j *summaryJob) run(ctx context.Context, r *Run) (int64, error) {
	state, err := j.st.ReadSummaryState(ctx)
	if err != nil {
		return 0, err
	}
	if state.BootstrappedAt != nil {
		empty, err := j.st.SummaryLooksEmpty(ctx)
		if err != nil {
			return 0, err
		}
		if empty {
			r.Logger.Warn("queue_summary is empty while messages are stored; rebuilding it")
			if err := j.st.ResetSummaryBootstrap(ctx, r.Lease); err != nil {
				return 0, err
			}
			state.BootstrappedAt, state.PassStartedAt, state.PassCursor = nil, nil, nil
		}
	}
	passStarted, cursor := state.PassStartedAt, state.PassCursor
	if passStarted == nil {
		due := state.BootstrappedAt == nil || state.LastPassAt == nil || state.Now.Sub(*state.LastPassAt) >= j.every
		if !due {
			return 0, nil
		}
		now := state.Now
		passStarted, cursor = &now, nil
		if state.BootstrappedAt == nil {
			r.Logger.Info("summary bootstrap: counting every source queue once")
		}
	}

	// The store lists the queues after the cursor in the order it compares
	// them with (byte order, whatever the database's collation): the order
	// and the cursor are one rule, so a pass spread over several runs
	// reaches every queue once.
	queues, err := j.st.SourceQueues(ctx, cursor)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	var repaired int64
	for i, q := range queues {
		rep, err := j.st.ReconcileQueue(ctx, r.Lease, q, j.chunk)
		if err != nil {
			return repaired, err
		}
		if rep.Entries > 0 {
			repaired += int64(rep.Entries)
			j.repairs.Add(float64(rep.Entries))
			r.Logger.Warn("summary drift repaired", "source_queue", q, "entries", rep.Entries,
				"messages", rep.Messages, "deltas", fmt.Sprint(rep.Deltas))
		}
		if i < len(queues)-1 && time.Since(began) >= j.budget {
			if err := j.st.SaveSummaryPass(ctx, r.Lease, passStarted, &q, false); err != nil {
				return repaired, err
			}
			r.Logger.Debug("summary pass continues next tick", "cursor", q)
			return repaired, nil
		}
	}
	if err := j.st.SaveSummaryPass(ctx, r.Lease, nil, nil, true); err != nil {
		return repaired, err
	}
	if state.BootstrappedAt == nil {
		r.Logger.Info("summary bootstrap complete", "source_queues_last_run", len(queues), "repaired_entries", repaired)
	}
	return repaired, nil
}
