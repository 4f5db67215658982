package cron

import (
	"cmp"
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

// Categories job defaults.
const (
	CategoriesBudgetDefault = 20 * time.Second
	CategoriesBatchDefault  = 2000
)

// CategoriesConfig configures the categories job.
type CategoriesConfig struct {
	// Rules are the failure category rules the consumer applies at
	// ingest. Optional: nil leaves stored categories alone.
	Rules *category.Rules
	// Budget is roughly how long one run may spend before it saves its
	// place for the next tick. Optional, default CategoriesBudgetDefault.
	Budget time.Duration
	// Batch is the rows read per statement. Optional, default
	// CategoriesBatchDefault.
	Batch int
}

func (c *CategoriesConfig) setDefaults() {
	c.Budget = cmp.Or(c.Budget, CategoriesBudgetDefault)
	c.Batch = cmp.Or(c.Batch, CategoriesBatchDefault)
}

// categoriesJob keeps stored categories true to the rules. Rows get their
// category at ingest; when the rules change (a new Rules.Hash: a rule
// added, edited, reordered, the defaults turned off) the rows stored
// before are recomputed by a pass over every id up to the largest one at
// the pass's start, in id order, a batch per statement. A pass spreads
// over as many ticks as it needs: each run stops after Budget and saves
// its place (category_state), so the next run, on whichever instance,
// goes on; a run that lost its lease writes nothing. Its progress is in
// GET /api/v1/stats ("categorisation").
//
// Instances must run with the same rules: an instance whose rules differ
// from the pass in progress starts the pass over for its own.
type categoriesJob struct {
	st      *store.Store
	rules   *category.Rules
	budget  time.Duration
	batch   int
	changed prometheus.Counter
}

func newCategoriesJob(st *store.Store, reg prometheus.Registerer, cfg CategoriesConfig) (*categoriesJob, error) {
	changed, err := promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dlq_recategorized_total",
		Help: "Stored messages whose failure category the categories job changed after a change of the rules.",
	}))
	if err != nil {
		return nil, err
	}
	return &categoriesJob{st: st, rules: cfg.Rules, budget: cfg.Budget, batch: cfg.Batch, changed: changed}, nil
}

func (j *categoriesJob) run(ctx context.Context, r *Run) (int64, error) {
	if j.rules == nil {
		return 0, nil
	}
	hash := j.rules.Hash()
	state, err := j.st.ReadCategoryState(ctx)
	if err != nil {
		return 0, err
	}
	pass := state.Pass
	switch {
	case pass != nil && pass.RulesHash == hash:
	case pass == nil && state.RulesHash == hash:
		return 0, nil
	default:
		if pass != nil {
			r.Logger.Warn("category pass in progress is for other rules; starting over with this instance's",
				"pass_rules", pass.RulesHash, "rules", hash)
		}
		p, err := j.st.StartCategoryPass(ctx, r.Lease, hash)
		if err != nil {
			return 0, err
		}
		pass = &p
		r.Logger.Info("failure category rules changed: recomputing stored categories", "rules", hash,
			"previous_rules", state.RulesHash, "max_id", p.MaxID)
	}
	withHeaders := j.rules.NeedsHeaders()
	categorize := func(in store.CategoryInput) string {
		f := category.Fields{SourceQueue: in.SourceQueue, Reason: in.Reason, FailureType: in.FailureType, FailureMessage: in.FailureMessage}
		if withHeaders {
			f.Header = category.HeadersJSON(in.Headers)
		}
		return j.rules.Of(f)
	}
	began := time.Now()
	var changed int64
	for {
		res, err := j.st.RecategorizeBatch(ctx, r.Lease, pass.Cursor, pass.MaxID, j.batch, withHeaders, categorize)
		if err != nil {
			return changed, err
		}
		pass.Scanned += res.Scanned
		pass.Changed += res.Changed
		changed += res.Changed
		j.changed.Add(float64(res.Changed))
		done := res.Scanned < int64(j.batch)
		if res.Last > 0 {
			pass.Cursor = res.Last
		}
		if err := j.st.SaveCategoryPass(ctx, r.Lease, *pass, done); err != nil {
			return changed, err
		}
		if done {
			r.Logger.Info("stored failure categories recomputed", "rules", hash, "scanned", pass.Scanned, "changed", pass.Changed)
			return changed, nil
		}
		if time.Since(began) >= j.budget {
			r.Logger.Debug("category pass continues next tick", "cursor", pass.Cursor, "max_id", pass.MaxID)
			return changed, nil
		}
	}
}
