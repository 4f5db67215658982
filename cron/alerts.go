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
}

func newAlertJob(st *store.Store, log *slog.Logger, reg prometheus.Registerer, cfg AlertsConfig, capacity cleanup.Capacity, policies []string) (*alertJob, error) {
	if reg == nil {
		reg = prometheus.NewRegistry() // the dispatcher insists on one
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
		States: stateStore{st: st},
	})
	if err != nil {
		return nil, err
	}
	return &alertJob{st: st, rules: cfg.Rules, dispatcher: disp, capacity: capacity, policies: policies}, nil
}

func (j *alertJob) run(ctx context.Context, r *Run) (int64, error) {
	c, err := alerts.NewChecker(alerts.CheckerConfig{
		Logger: r.Logger,
		Source: snapshotSource{st: j.st, capacity: j.capacity, policies: j.policies,
			newLimit: j.rules.CountLimit(alerts.KindIngestSpike)},
		States:     stateStore{st: j.st, lease: r.Lease},
		Dispatcher: j.dispatcher,
		Rules:      j.rules,
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
	st    *store.Store
	lease store.Lease
}

func (s stateStore) LoadAlertState(ctx context.Context) (alerts.State, error) {
	return loadAlertState(ctx, s.st)
}

func (s stateStore) SaveAlertState(ctx context.Context, state alerts.State) error {
	b, err := json.Marshal(state)
	if err != nil {
		return fmt.Errorf("encode alert state: %w", err)
	}
	return s.st.SaveAlertState(ctx, s.lease, b)
}

func loadAlertState(ctx context.Context, st *store.Store) (alerts.State, error) {
	rec, err := st.LoadAlertState(ctx)
	if err != nil || rec.State == nil {
		return alerts.State{}, err
	}
	var state alerts.State
	if err := json.Unmarshal(rec.State, &state); err != nil {
		return alerts.State{}, fmt.Errorf("decode alert state saved at %s: %w", rec.UpdatedAt.Format(time.RFC3339), err)
	}
	return state, nil
}

// AlertsView is what GET /api/v1/alerts shows.
type AlertsView struct {
	// Rules are the configured rules with their per-queue overrides.
	Rules []alerts.RuleView `json:"rules"`
	// Alerts are the (rule, source queue) pairs that are pending, firing or
	// just resolved, each with the time it entered that state (since).
	// Pairs not listed are inactive.
	Alerts []alerts.AlertView `json:"alerts"`
	// EvaluatedAt is the time of the last evaluation, null before the
	// first.
	EvaluatedAt *time.Time `json:"evaluated_at"`
	// Schedule is the alert job's schedule ("off" when disabled).
	Schedule string `json:"schedule"`
}

// Alerts returns the rules and the saved alert state.
func (s *Service) Alerts(ctx context.Context) (AlertsView, error) {
	state, err := loadAlertState(ctx, s.cfg.Store)
	if err != nil {
		return AlertsView{}, fmt.Errorf("cron: read alert state: %w", err)
	}
	v := AlertsView{Rules: s.cfg.Alerts.Rules.View(), Alerts: state.View(), Schedule: s.schedule(s.cfg.Schedules.Alerts)}
	if !state.EvaluatedAt.IsZero() {
		t := state.EvaluatedAt
		v.EvaluatedAt = &t
	}
	return v, nil
}
