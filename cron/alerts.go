package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/store"
)

// The store's repeat-failure query and partial index hard-code the replay
// count the rule text promises; this fails to compile if they part ways.
var _ = [1]struct{}{}[alerts.RepeatFailureReplays-store.RepeatFailureReplays]

// AlertsConfig is what the alert job evaluates and whom it tells.
type AlertsConfig struct {
	// Rules are evaluated each tick. Optional, default
	// alerts.DefaultRuleSet() (used when Rules.Rules is nil).
	Rules alerts.RuleSet
	// Notifiers are the receivers besides the log. Optional.
	Notifiers []alerts.Notifier
	// MaxAttempts, InitialBackoff and MaxBackoff tune delivery retries.
	// Optional, defaults from package alerts.
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

func (c *AlertsConfig) setDefaults() {
	if c.Rules.Rules == nil {
		c.Rules = alerts.DefaultRuleSet()
	}
}

// alertJob runs one alert evaluation per tick: the alerts package's Checker
// loads the state saved by the previous evaluation (on whichever instance),
// reads a snapshot from the summary, evaluates, saves the new state under
// this run's lease and only then notifies. An instance that lost the lease
// cannot save, so it sends nothing: notifications are not duplicated across
// instances.
//
// The job lives here rather than in package alerts, which never touches the
// database: this file is the seam, reading the snapshot and keeping the
// state in the store for it.
type alertJob struct {
	st         *store.Store
	rules      alerts.RuleSet
	dispatcher *alerts.Dispatcher
	capacity   cleanup.Capacity
	policies   []string
	// schedule is this instance's alerts schedule, nil when off: each
	// state it saves says when it turns stale (alerts.StaleBound).
	schedule alerts.Schedule
	// fallback judges states saved without stale_after (by a dlq before
	// it): this instance's schedule, or the default one when off here.
	fallback alerts.Schedule
}

func newAlertJob(st *store.Store, log *slog.Logger, reg prometheus.Registerer, cfg AlertsConfig, spec string, capacity cleanup.Capacity, policies []string) (*alertJob, error) {
	if reg == nil {
		reg = prometheus.NewRegistry() // the dispatcher insists on one
	}
	var schedule alerts.Schedule
	if spec != ScheduleOff {
		s, err := ParseSchedule(spec)
		if err != nil {
			return nil, fmt.Errorf("cron: alerts schedule: %w", err)
		}
		schedule = s
	}
	fallback := schedule
	if fallback == nil {
		s, err := ParseSchedule(AlertsScheduleDefault)
		if err != nil {
			return nil, fmt.Errorf("cron: default alerts schedule: %w", err)
		}
		fallback = s
	}
	var ruleNames []string
	for _, r := range cfg.Rules.Rules {
		ruleNames = append(ruleNames, r.Name)
	}
	disp, err := alerts.NewDispatcher(alerts.DispatcherConfig{
		Logger: log.With("component", "alerts"), Registerer: reg, Notifiers: cfg.Notifiers,
		RuleNames: ruleNames, MaxAttempts: cfg.MaxAttempts,
		InitialBackoff: cfg.InitialBackoff, MaxBackoff: cfg.MaxBackoff,
		// Every instance builds this job, with or without its ticks (cron
		// disabled, or the lease elsewhere): dlq_alerts_firing reports the
		// saved state on each, not what this one evaluated last.
		States: stateStore{st: st, fallback: fallback},
	})
	if err != nil {
		return nil, err
	}
	return &alertJob{st: st, rules: cfg.Rules, dispatcher: disp, capacity: capacity, policies: policies,
		schedule: schedule, fallback: fallback}, nil
}

func (j *alertJob) run(ctx context.Context, r *Run) (int64, error) {
	c, err := alerts.NewChecker(alerts.CheckerConfig{
		Logger: r.Logger,
		Source: snapshotSource{st: j.st, capacity: j.capacity, policies: j.policies,
			newLimit: j.rules.CountLimit(alerts.KindIngestSpike)},
		States:     stateStore{st: j.st, lease: r.Lease, fallback: j.fallback},
		Dispatcher: j.dispatcher,
		Rules:      j.rules,
		Schedule:   j.schedule,
	})
	if err != nil {
		return 0, err
	}
	n, err := c.Check(ctx)
	return int64(n), err
}

// snapshotSource builds alerts.Snapshot from the summary (store.AlertNumbers),
// the policies' state and the requests waiting for approval.
type snapshotSource struct {
	st       *store.Store
	capacity cleanup.Capacity
	// policies are the configured policies' names.
	policies []string
	// newLimit is how far the store counts the messages of the last five
	// minutes (alerts.RuleSet.CountLimit).
	newLimit int64
}

func (s snapshotSource) AlertSnapshot(ctx context.Context) (alerts.Snapshot, error) {
	n, err := s.st.AlertNumbers(ctx, s.newLimit)
	if err != nil {
		return alerts.Snapshot{}, err
	}
	snap := toSnapshot(n, s.capacity)
	if len(s.policies) > 0 {
		states, err := s.st.PolicyStates(ctx)
		if err != nil {
			return alerts.Snapshot{}, err
		}
		for _, name := range s.policies {
			st := states[name]
			ps := alerts.PolicyStats{Name: name, Paused: st.Paused}
			if st.PausedReason != nil {
				ps.Reason = *st.PausedReason
			} else if st.PausedBy != nil {
				ps.Reason = "paused by " + *st.PausedBy
			}
			snap.Policies = append(snap.Policies, ps)
		}
	}
	pending, err := s.st.PendingApprovals(ctx)
	if err != nil {
		return alerts.Snapshot{}, err
	}
	for _, a := range pending {
		snap.Approvals = append(snap.Approvals, alerts.ApprovalStats{ID: a.ID, Action: a.Action, Count: a.Count,
			RequestedBy: a.RequestedBy, ExpiresAt: a.ExpiresAt})
	}
	return snap, nil
}

func toSnapshot(n store.AlertNumbers, c cleanup.Capacity) alerts.Snapshot {
	snap := alerts.Snapshot{
		At: n.At,
		Capacity: alerts.CapacityStats{
			Messages: n.Totals.Messages, MaxMessages: c.MaxMessages,
			Bytes: n.Totals.Bytes, MaxBytes: c.MaxBytes,
		},
	}
	for _, q := range n.Queues {
		qs := alerts.QueueStats{
			SourceQueue: q.SourceQueue, Pending: q.Pending,
			RepeatFailures: q.RepeatFailures, NewLast5m: q.NewLast5m, AutoExhausted: q.AutoExhausted,
		}
		if q.OldestPendingAt != nil {
			qs.OldestPending = max(n.At.Sub(*q.OldestPendingAt), 0)
		}
		snap.Queues = append(snap.Queues, qs)
	}
	return snap
}

// stateStore keeps alerts.State in alert_state, saving under one run's lease.
type stateStore struct {
	st       *store.Store
	lease    store.Lease
	fallback alerts.Schedule
}

func (s stateStore) LoadAlertState(ctx context.Context) (alerts.State, error) {
	state, _, err := loadAlertState(ctx, s.st, s.fallback)
	return state, err
}

func (s stateStore) SaveAlertState(ctx context.Context, state alerts.State) error {
	b, err := json.Marshal(state)
	if err != nil {
		return fmt.Errorf("encode alert state: %w", err)
	}
	return s.st.SaveAlertState(ctx, s.lease, b)
}

// loadAlertState returns the saved state and the database's clock at the
// read. A state saved without stale_after (by a dlq from before it) gets
// the one fallback implies, so that it too turns stale once nobody
// evaluates.
func loadAlertState(ctx context.Context, st *store.Store, fallback alerts.Schedule) (alerts.State, time.Time, error) {
	rec, err := st.LoadAlertState(ctx)
	if err != nil || rec.State == nil {
		return alerts.State{}, rec.ReadAt, err
	}
	var state alerts.State
	if err := json.Unmarshal(rec.State, &state); err != nil {
		return alerts.State{}, rec.ReadAt, fmt.Errorf("decode alert state saved at %s: %w", rec.UpdatedAt.Format(time.RFC3339), err)
	}
	if state.StaleAfter.IsZero() && !state.EvaluatedAt.IsZero() && fallback != nil {
		state.StaleAfter = alerts.StaleBound(fallback, state.EvaluatedAt)
	}
	return state, rec.ReadAt, nil
}

// AlertsView is what GET /api/v1/alerts shows.
type AlertsView struct {
	// Rules are the configured rules with their per-queue overrides.
	Rules []alerts.RuleView `json:"rules"`
	// Alerts are the (rule, source queue) pairs that are pending, firing or
	// just resolved, each with the time it entered that state (since).
	// Pairs not listed are inactive. While Stale, each is unknown since
	// the last evaluation, with its last known state in last_state.
	Alerts []alerts.AlertView `json:"alerts"`
	// EvaluatedAt is the time of the last evaluation, null before the
	// first.
	EvaluatedAt *time.Time `json:"evaluated_at"`
	// AgeSeconds is how long ago that was, on the database's clock; null
	// before the first evaluation.
	AgeSeconds *float64 `json:"age_seconds"`
	// StaleAfter is when the saved state turns stale unless alerts are
	// evaluated again (alerts.StaleBound); null before the first
	// evaluation.
	StaleAfter *time.Time `json:"stale_after"`
	// Stale is true once StaleAfter has passed: no instance evaluates
	// alerts any more (the job is off everywhere, or nothing runs it), so
	// no alert is known to be firing.
	Stale bool `json:"stale"`
	// Schedule is the alert job's schedule on the instance that answered
	// ("off" when disabled there; another instance may still run it).
	Schedule string `json:"schedule"`
}

// Alerts returns the rules and the saved alert state, as it stands now:
// a stale state shows its alerts as unknown, not firing.
func (s *Service) Alerts(ctx context.Context) (AlertsView, error) {
	state, now, err := loadAlertState(ctx, s.cfg.Store, s.alerts.fallback)
	if err != nil {
		return AlertsView{}, fmt.Errorf("cron: read alert state: %w", err)
	}
	v := AlertsView{Rules: s.cfg.Alerts.Rules.View(), Alerts: state.ViewAt(now), Schedule: s.schedule(s.cfg.Schedules.Alerts)}
	if !state.EvaluatedAt.IsZero() {
		evaluated, staleAfter, age := state.EvaluatedAt, state.StaleAfter, max(now.Sub(state.EvaluatedAt).Seconds(), 0)
		v.EvaluatedAt, v.StaleAfter, v.AgeSeconds = &evaluated, &staleAfter, &age
		v.Stale = state.Stale(now)
	}
	return v, nil
}
