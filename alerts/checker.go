package alerts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// SnapshotSource reads the numbers the rules look at. The store implements
// it from the summary table, in O(source queues).
type SnapshotSource interface {
	// AlertSnapshot returns the current Snapshot. It should set At from the
	// database clock so every instance measures time alike; when At is zero
	// the Checker uses its own clock.
	AlertSnapshot(ctx context.Context) (Snapshot, error)
}

// StateStore keeps the State between evaluations, shared by all instances.
// The store implements it (one JSON document is enough).
type StateStore interface {
	// LoadAlertState returns the last saved State, or the zero State if
	// none was ever saved.
	LoadAlertState(ctx context.Context) (State, error)
	// SaveAlertState replaces the saved State. It must fail when the caller
	// no longer holds the alert job's lease (fencing), so that an instance
	// that lost the job cannot overwrite the new holder's state.
	SaveAlertState(ctx context.Context, s State) error
}

// CheckerConfig configures a Checker.
type CheckerConfig struct {
	// Logger is for the check itself. Required.
	Logger *slog.Logger
	// Source gives the snapshot. Required.
	Source SnapshotSource
	// States loads and saves the state. Required.
	States StateStore
	// Dispatcher delivers notifications and keeps the metrics. Required.
	Dispatcher *Dispatcher
	// Rules are evaluated; it is validated here. Required: use
	// Config.RuleSet or DefaultRuleSet.
	Rules RuleSet
	// Now is the clock used when the snapshot has no time. Optional,
	// default time.Now.
	Now func() time.Time
	// Schedule is when this evaluator runs the check; each saved State
	// carries the StaleAfter it implies, so that readers on any instance
	// (whatever their own configuration) can tell once evaluations have
	// stopped. Optional: without it the State has no StaleAfter.
	Schedule Schedule
}

func (c *CheckerConfig) validate() error {
	switch {
	case c.Logger == nil:
		return errors.New("logger: required")
	case c.Source == nil:
		return errors.New("source: required")
	case c.States == nil:
		return errors.New("states: required")
	case c.Dispatcher == nil:
		return errors.New("dispatcher: required")
	}
	return c.Rules.Validate()
}

// Checker is one alert check, meant to be run by the scheduler on one
// instance at a time: load state, read snapshot, Evaluate, save, notify.
type Checker struct {
	cfg CheckerConfig
}

// NewChecker checks cfg and returns the Checker.
func NewChecker(cfg CheckerConfig) (*Checker, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("alerts: checker config: %w", err)
	}
	return &Checker{cfg: cfg}, nil
}

// Check runs one evaluation and returns how many notifications it produced.
//
// The new state is saved before anything is sent. Saving is the commit
// point: if it fails (the lease moved to another instance, the database is
// down) nothing is sent, and whoever saves next will send. So a transition is
// notified at most once; a crash between save and send loses that one
// notification, which the repeat interval (and Alertmanager's refresh)
// bring back for alerts that keep firing. The reverse order would instead
// send duplicates whenever a fenced-out instance evaluated alongside the new
// holder.
//
// A delivery error is returned after the metrics are updated; the state
// stays saved either way.
func (c *Checker) Check(ctx context.Context) (int, error) {
	prev, err := c.cfg.States.LoadAlertState(ctx)
	if err != nil {
		return 0, fmt.Errorf("alerts: load state: %w", err)
	}
	snap, err := c.cfg.Source.AlertSnapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("alerts: read snapshot: %w", err)
	}
	if snap.At.IsZero() {
		snap.At = c.cfg.Now()
	}
	next, notes := Evaluate(prev, snap, c.cfg.Rules)
	if c.cfg.Schedule != nil {
		next.StaleAfter = StaleBound(c.cfg.Schedule, next.EvaluatedAt)
	}
	if err := c.cfg.States.SaveAlertState(ctx, next); err != nil {
		return 0, fmt.Errorf("alerts: save state evaluated at %s: %w", snap.At.Format(time.RFC3339), err)
	}
	c.cfg.Dispatcher.SetFiring(next)
	if len(notes) > 0 {
		c.cfg.Logger.Debug("alert check produced notifications", "notifications", len(notes), "evaluated_at", snap.At)
	}
	if err := c.cfg.Dispatcher.Dispatch(ctx, next, notes); err != nil {
		return len(notes), err
	}
	return len(notes), nil
}
