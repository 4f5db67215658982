package cron

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

// Policy is one automatic replay policy (recovery.policies; docs/REPLAY.md,
// "Automatic replay policies"), with its defaults applied.
type Policy struct {
	Name string `json:"name"`
	// Queues, Reasons and Groups (failure group ids) restrict what the
	// policy replays; empty means any. Categories is required.
	Queues     []string `json:"queues"`
	Categories []string `json:"categories"`
	Reasons    []string `json:"reasons"`
	Groups     []string `json:"groups"`
	// The schedule (Delay).
	FirstDelay    time.Duration `json:"-"`
	BackoffFactor float64       `json:"backoff_factor"`
	MaxDelay      time.Duration `json:"-"`
	Jitter        float64       `json:"jitter"`
	MaxAttempts   int           `json:"max_attempts"`
	// RatePerSecond throttles each attempt's replay task (0: as fast as
	// confirms allow).
	RatePerSecond float64 `json:"rate_per_second"`
	// Canary, when set, goes with each attempt: if one of its first
	// messages dies again, the attempt stops and the policy pauses.
	Canary *PolicyCanary `json:"canary"`
	// UnknownRetries is how often each attempt's task sends a publish
	// whose outcome is unknown again (replay's on_unknown retry and its
	// bound); 0 holds it (on_unknown hold).
	UnknownRetries int `json:"-"`
	// DryRun only records what the policy would do.
	DryRun bool `json:"dry_run"`
}

// onUnknown names what the policy's tasks do with unknown outcomes, as a
// replay request's on_unknown.
func (p Policy) onUnknown() string {
	if p.UnknownRetries > 0 {
		return "retry"
	}
	return "hold"
}

// PolicyCanary is a policy's canary, as a replay request's.
type PolicyCanary struct {
	Count       int `json:"count"`
	WaitSeconds int `json:"wait_seconds"`
}

// Delay is how long after message id last failed (or after its previous
// attempt, if it did not die again since) attempt (from 1) of p is due:
// FirstDelay × BackoffFactor^(attempt-1), at most MaxDelay, spread by
// Jitter (store.PolicyJitter). The store's query computes the same.
func (p Policy) Delay(id int64, attempt int) time.Duration {
	d := min(p.FirstDelay.Seconds()*math.Pow(p.BackoffFactor, float64(attempt-1)), p.MaxDelay.Seconds())
	d *= 1 + p.Jitter*(2*store.PolicyJitter(id, attempt)-1)
	return time.Duration(d * float64(time.Second))
}

func (p Policy) selection() (store.PolicySelection, error) {
	sel := store.PolicySelection{
		Name: p.Name, Queues: p.Queues, Reasons: p.Reasons, Categories: p.Categories,
		FirstDelay: p.FirstDelay, MaxDelay: p.MaxDelay, BackoffFactor: p.BackoffFactor, Jitter: p.Jitter,
		MaxAttempts: p.MaxAttempts,
	}
	for _, g := range p.Groups {
		id, err := store.ParseGroupID(g)
		if err != nil {
			return sel, fmt.Errorf("policy %s: groups: %w", p.Name, err)
		}
		sel.Groups = append(sel.Groups, id)
	}
	return sel, nil
}

func (p Policy) validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("policy %q: "+format, append([]any{p.Name}, a...)...))
	}
	if p.Name == "" {
		bad("a name is required")
	}
	if len(p.Categories) == 0 {
		bad("categories is required")
	}
	if _, err := p.selection(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case p.FirstDelay < 0, p.MaxDelay < p.FirstDelay:
		bad("delays must satisfy 0 <= first_delay (%s) <= max_delay (%s)", p.FirstDelay, p.MaxDelay)
	case !(p.BackoffFactor >= 1), !(p.Jitter >= 0 && p.Jitter <= 1):
		bad("backoff_factor (%v) must be >= 1 and jitter (%v) between 0 and 1", p.BackoffFactor, p.Jitter)
	case p.MaxAttempts < 1, p.RatePerSecond < 0:
		bad("max_attempts (%d) must be >= 1 and rate_per_second (%v) >= 0", p.MaxAttempts, p.RatePerSecond)
	}
	return errors.Join(errs...)
}

// Policies job defaults.
const (
	// PolicyLimitDefault is the most messages one attempt's task takes.
	PolicyLimitDefault = 10000
)

// PoliciesConfig configures the policies job.
type PoliciesConfig struct {
	// Policies are run in order. Optional.
	Policies []Policy
	// Limit is the most messages one attempt's replay task takes; the
	// rest wait for the next run. Optional, default PolicyLimitDefault.
	Limit int
}

func (c *PoliciesConfig) setDefaults() { c.Limit = cmp.Or(c.Limit, PolicyLimitDefault) }

func (c *PoliciesConfig) validate() error {
	var errs []error
	names := map[string]bool{}
	for _, p := range c.Policies {
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("policy %q is listed twice", p.Name))
		}
		names[p.Name] = true
		errs = append(errs, p.validate())
	}
	return errors.Join(errs...)
}

// policiesJob runs the automatic replay policies, each in turn, under the
// job's lease. For a policy that is not paused, a run:
//
//  1. pauses it when the canary of one of its attempts died again since
//     the last run (an audit row, the alert policy_paused, the gauge
//     dlq_policy_paused);
//  2. in dry-run mode, records what it would replay and park, and stops;
//  3. parks the pending messages it has tried max_attempts times
//     (auto_exhausted);
//  4. starts one replay task, actor policy:<name>, of the messages whose
//     next attempt is due (at most Limit, oldest first), counting the
//     attempt for each in the same transaction.
//
// A task of the policy that is still running holds back 3 and 4 until it
// ends (store.StartPolicyAttempt), so the policy's rate holds and a
// message is never in two attempts at once. The replay tasks run on the
// replay runners of any instance, with the claims, the loop guard
// (replay.max_replays) and the canary of every replay.
type policiesJob struct {
	st       *store.Store
	policies []Policy
	limit    int
	replayed *prometheus.CounterVec
	parked   *prometheus.CounterVec
}

func newPoliciesJob(st *store.Store, reg prometheus.Registerer, cfg PoliciesConfig) (*policiesJob, error) {
	replayed, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_policy_replayed_total",
		Help: "Messages an automatic replay policy sent to be replayed (put into one of its attempts' replay tasks), by policy, on this instance.",
	}, []string{"policy"}))
	if err != nil {
		return nil, err
	}
	parked, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_policy_parked_total",
		Help: "Messages an automatic replay policy parked (auto_exhausted) after max_attempts, by policy, on this instance.",
	}, []string{"policy"}))
	if err != nil {
		return nil, err
	}
	for _, p := range cfg.Policies {
		replayed.WithLabelValues(p.Name)
		parked.WithLabelValues(p.Name)
	}
	return &policiesJob{st: st, policies: cfg.Policies, limit: cfg.Limit, replayed: replayed, parked: parked}, nil
}

func (j *policiesJob) run(ctx context.Context, r *Run) (int64, error) {
	if len(j.policies) == 0 {
		return 0, nil
	}
	states, err := j.st.PolicyStates(ctx)
	if err != nil {
		return 0, err
	}
	var (
		total int64
		errs  []error
	)
	for _, p := range j.policies {
		n, err := j.runOne(ctx, r, p, states[p.Name])
		total += n
		if errors.Is(err, store.ErrLeaseLost) || ctx.Err() != nil {
			return total, err
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := j.st.ForgetPolicyAttempts(ctx, r.Lease, 10000); err != nil {
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}

func (j *policiesJob) runOne(ctx context.Context, r *Run, p Policy, state store.PolicyState) (int64, error) {
	log := r.Logger.With("policy", p.Name)
	sel, err := p.selection()
	if err != nil {
		return 0, err
	}
	if !state.Paused {
		task, err := j.st.PauseOnCanary(ctx, r.Lease, p.Name)
		if err != nil {
			return 0, err
		}
		if task > 0 {
			log.Warn("automatic replay policy paused: its canary died again", "task_id", task)
			state.Paused = true
		}
	}
	if state.Paused {
		return 0, nil
	}
	if p.DryRun {
		pv, err := j.st.PreviewPolicy(ctx, sel, int64(j.limit), 10)
		if err != nil {
			return 0, err
		}
		if pv.Due > 0 || pv.WouldPark > 0 {
			log.Info("automatic replay policy dry run", "would_replay", pv.Due, "would_park", pv.WouldPark, "sample", pv.Sample)
		}
		return 0, j.st.NotePolicyRun(ctx, r.Lease, p.Name, &pv)
	}
	parked, err := j.st.ParkExhausted(ctx, r.Lease, sel)
	if err != nil {
		return 0, err
	}
	for q, n := range parked {
		j.parked.WithLabelValues(p.Name).Add(float64(n))
		log.Warn("messages parked after the policy's last attempt", "source_queue", q, "messages", n, "max_attempts", p.MaxAttempts)
	}
	a := store.PolicyAttempt{Selection: sel, Limit: int64(j.limit), RatePerSecond: p.RatePerSecond, UnknownRetries: p.UnknownRetries}
	req := map[string]any{}
	req["on_unknown"] = p.onUnknown()
	if p.RatePerSecond > 0 {
		req["rate_per_second"] = p.RatePerSecond
	}
	if p.Canary != nil {
		a.CanaryCount, a.CanaryWait = p.Canary.Count, time.Duration(p.Canary.WaitSeconds)*time.Second
		req["canary"] = p.Canary
	}
	if a.Request, err = json.Marshal(req); err != nil {
		return 0, fmt.Errorf("encode the request of policy %s: %w", p.Name, err)
	}
	res, err := j.st.StartPolicyAttempt(ctx, r.Lease, a)
	if err != nil {
		return 0, err
	}
	var n int64
	if res.Task != nil {
		n = res.Task.Requested
		j.replayed.WithLabelValues(p.Name).Add(float64(n))
		log.Info("automatic replay policy replays messages", "task_id", res.Task.ID, "messages", n, "by_attempt", fmt.Sprint(res.Attempts))
	} else if res.Busy {
		log.Debug("automatic replay policy waits for its running task")
	}
	return n, j.st.NotePolicyRun(ctx, r.Lease, p.Name, nil)
}

// PoliciesView is what GET /api/v1/policies shows.
type PoliciesView struct {
	// Schedule is the policies job's schedule ("off" when this instance
	// runs no job).
	Schedule string       `json:"schedule"`
	Policies []PolicyView `json:"policies"`
}

// PolicyView is one policy: its configuration, its schedule spelled out
// and its state.
type PolicyView struct {
	Policy
	FirstDelay string `json:"first_delay"`
	MaxDelay   string `json:"max_delay"`
	// OnUnknown is what its tasks do with unknown outcomes: retry or hold.
	OnUnknown string `json:"on_unknown"`
	// Delays are the delays of its attempts, without jitter.
	Delays []string `json:"delays"`
	store.PolicyState
}

// Policies returns every configured policy with its state.
func (s *Service) Policies(ctx context.Context) (PoliciesView, error) {
	states, err := s.cfg.Store.PolicyStates(ctx)
	if err != nil {
		return PoliciesView{}, err
	}
	v := PoliciesView{Schedule: s.schedule(s.cfg.Schedules.Policies), Policies: []PolicyView{}}
	for _, p := range s.cfg.Policies.Policies {
		pv := PolicyView{Policy: p, FirstDelay: p.FirstDelay.String(), MaxDelay: p.MaxDelay.String(), PolicyState: states[p.Name],
			OnUnknown: p.onUnknown()}
		for k := 1; k <= p.MaxAttempts; k++ {
			flat := p
			flat.Jitter = 0
			pv.Delays = append(pv.Delays, flat.Delay(0, k).String())
		}
		for _, f := range []*[]string{&pv.Queues, &pv.Reasons, &pv.Groups} {
			if *f == nil {
				*f = []string{}
			}
		}
		v.Policies = append(v.Policies, pv)
	}
	return v, nil
}

// Policy returns one configured policy; false when there is none.
func (s *Service) Policy(name string) (Policy, bool) {
	i := slices.IndexFunc(s.cfg.Policies.Policies, func(p Policy) bool { return p.Name == name })
	if i < 0 {
		return Policy{}, false
	}
	return s.cfg.Policies.Policies[i], true
}

// policyCollector exposes dlq_policy_paused{policy} on every scrape, from
// the policies' state in PostgreSQL, so every instance shows the same.
type policyCollector struct {
	st     *store.Store
	log    *slog.Logger
	names  []string
	paused *prometheus.Desc
}

func newPolicyCollector(st *store.Store, log *slog.Logger, policies []Policy) *policyCollector {
	c := &policyCollector{st: st, log: log, paused: prometheus.NewDesc("dlq_policy_paused",
		"1 while an automatic replay policy is paused (by an operator, or by itself when its canary died again), 0 otherwise.",
		[]string{"policy"}, nil)}
	for _, p := range policies {
		c.names = append(c.names, p.Name)
	}
	return c
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.paused }

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	if len(c.names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	states, err := c.st.PolicyStates(ctx)
	if err != nil {
		c.log.Debug("cannot read policy states for metrics", "error", err)
		return
	}
	for _, n := range c.names {
		v := 0.0
		if states[n].Paused {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, v, n)
	}
}
