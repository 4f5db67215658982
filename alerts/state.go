package alerts

import (
	"cmp"
	"slices"
	"time"
)

// StateVersion is the layout version written into State. A reader seeing a
// newer version than it knows was written by a newer dlq; the fields are only
// ever added, so it may still read it.
const StateVersion = 1

// Phase is where one (rule, source queue) pair stands. Inactive pairs are not
// stored at all, which keeps the state as small as the trouble it tracks.
type Phase string

const (
	// PhaseInactive: the condition is false. Never stored; used in views.
	PhaseInactive Phase = "inactive"
	// PhasePending: the condition is true but has not held for the rule's For.
	PhasePending Phase = "pending"
	// PhaseFiring: the condition has held for For; receivers were told.
	PhaseFiring Phase = "firing"
	// PhaseResolved: the condition turned false after firing; receivers were
	// told once. The next evaluation drops the entry (back to inactive) or,
	// if the condition is true again, starts a new pending cycle.
	PhaseResolved Phase = "resolved"
	// PhaseUnknown: the state is stale (State.Stale): alerts are no longer
	// evaluated, so what the pair's phase is now is not known. Never
	// stored; used in views, which keep the last known phase beside it.
	PhaseUnknown Phase = "unknown"
)

// State is the alert state carried from one evaluation to the next. It is
// plain data with JSON tags: the caller stores it (one JSON document in
// PostgreSQL is enough) and whichever instance runs the next evaluation loads
// it and continues where the last one stopped.
type State struct {
	Version     int       `json:"version"`
	EvaluatedAt time.Time `json:"evaluated_at,omitzero"`
	// StaleAfter is when this state stops being current unless a later
	// evaluation replaces it: StaleAfterTicks activations of the
	// evaluating instance's schedule after EvaluatedAt, plus StaleGrace
	// (StaleBound). Zero when the evaluator gave no schedule: then the
	// state is never judged stale by itself (a reader may fill it in; see
	// package cron).
	StaleAfter time.Time `json:"stale_after,omitzero"`
	// Alerts holds the non-inactive pairs sorted by rule, then source queue.
	Alerts []AlertState `json:"alerts"`
}

// AlertState is the state of one (rule, source queue) pair.
type AlertState struct {
	Rule string `json:"rule"`
	Kind Kind   `json:"kind"`
	// SourceQueue is empty for global rules (capacity) and per-subject
	// ones.
	SourceQueue string `json:"source_queue,omitempty"`
	// Subject names what a per-subject rule looked at: a policy's name,
	// an approval request's id.
	Subject string `json:"subject,omitempty"`
	// Detail is what the last evaluation said about the subject, for the
	// notification's description.
	Detail string `json:"detail,omitempty"`
	Phase  Phase  `json:"state"`
	// Severity, Labels and RunbookURL are kept so that an alert whose rule
	// was removed from the configuration can still be resolved as it fired,
	// and so that State.Firing, which has no RuleSet, can rebuild alerts.
	Severity   string            `json:"severity"`
	Labels     map[string]string `json:"labels,omitempty"`
	RunbookURL string            `json:"runbook_url,omitempty"`
	// Value and Threshold are from the last evaluation.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// ActiveAt is when the condition became true (start of pending).
	ActiveAt time.Time `json:"active_at"`
	// FiredAt is when the alert fired; receivers see it as startsAt.
	FiredAt time.Time `json:"fired_at,omitzero"`
	// ResolvedAt is when the condition turned false after firing.
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	// LastNotifiedAt is the last time a notification was produced for this
	// pair; the repeat interval counts from it.
	LastNotifiedAt time.Time `json:"last_notified_at,omitzero"`
}

// Schedule is when alerts are evaluated: a cron schedule (robfig/cron's
// Schedule is one).
type Schedule interface {
	Next(time.Time) time.Time
}

// How long a saved state stays current: until StaleAfterTicks evaluations
// in a row were due and none saved, plus StaleGrace for the last one's run
// (reading the snapshot, saving) and for the lease to pass to another
// instance. One missed tick is ordinary (a slow run, a handover); three
// mean nobody evaluates: the job was switched off on every instance, or no
// instance runs at all.
const (
	StaleAfterTicks = 3
	StaleGrace      = time.Minute
)

// StaleBound is when a state evaluated at evaluatedAt under schedule sch
// becomes stale (State.StaleAfter).
func StaleBound(sch Schedule, evaluatedAt time.Time) time.Time {
	t := evaluatedAt
	for range StaleAfterTicks {
		next := sch.Next(t)
		if next.IsZero() {
			break // a schedule that stops firing: the grace only
		}
		t = next
	}
	return t.Add(StaleGrace)
}

// Stale says whether s is past its StaleAfter at now: alerts are no longer
// evaluated, and its phases are not known to hold any more. A state
// without StaleAfter (never evaluated, or saved without a schedule) is not
// stale.
func (s State) Stale(now time.Time) bool {
	return !s.StaleAfter.IsZero() && !now.Before(s.StaleAfter)
}

// Since is when the pair entered its current phase.
func (a AlertState) Since() time.Time {
	switch a.Phase {
	case PhaseFiring:
		return a.FiredAt
	case PhaseResolved:
		return a.ResolvedAt
	}
	return a.ActiveAt
}

type stateKey struct{ rule, queue, subject string }

func (a AlertState) key() stateKey { return stateKey{a.Rule, a.SourceQueue, a.Subject} }

func sortAlertStates(s []AlertState) {
	slices.SortFunc(s, func(a, b AlertState) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.SourceQueue, b.SourceQueue), cmp.Compare(a.Subject, b.Subject))
	})
}

// Firing returns one firing Alert for every pair in PhaseFiring. Receivers
// that forget alerts which are not refreshed (Alertmanager) get these on
// every evaluation; see Refresher.
func (s State) Firing() []Alert {
	var out []Alert
	for _, a := range s.Alerts {
		if a.Phase == PhaseFiring {
			out = append(out, newAlert(a))
		}
	}
	return out
}

// FiringCount returns how many pairs of each rule are firing.
func (s State) FiringCount() map[string]int {
	n := map[string]int{}
	for _, a := range s.Alerts {
		if a.Phase == PhaseFiring {
			n[a.Rule]++
		}
	}
	return n
}

// AlertView is one pair as the HTTP API shows it.
type AlertView struct {
	Rule         string    `json:"rule"`
	Kind         Kind      `json:"kind"`
	SourceQueue  string    `json:"source_queue,omitempty"`
	Subject      string    `json:"subject,omitempty"`
	State        Phase     `json:"state"`
	Since        time.Time `json:"since"`
	Severity     string    `json:"severity"`
	Value        float64   `json:"value"`
	Threshold    float64   `json:"threshold"`
	LastNotified time.Time `json:"last_notified,omitzero"`
	// RunbookURL is the alert's runbook_url ("" without a runbook).
	RunbookURL string `json:"runbook_url,omitempty"`
	// LastState and LastSince are set when the state is stale (State is
	// then unknown, since the last evaluation): the phase the last
	// evaluation left the pair in, and since when.
	LastState Phase     `json:"last_state,omitempty"`
	LastSince time.Time `json:"last_since,omitzero"`
}

// View returns every non-inactive pair for the API, in the state's order.
func (s State) View() []AlertView {
	out := make([]AlertView, 0, len(s.Alerts))
	for _, a := range s.Alerts {
		out = append(out, AlertView{
			Rule: a.Rule, Kind: a.Kind, SourceQueue: a.SourceQueue, Subject: a.Subject, State: a.Phase, Since: a.Since(),
			Severity: a.Severity, Value: a.Value, Threshold: a.Threshold, LastNotified: a.LastNotifiedAt, RunbookURL: a.RunbookURL,
		})
	}
	return out
}

// ViewAt is View as read at now. When s is stale, no pair is shown as
// firing, pending or resolved: each is unknown since the last evaluation,
// with its last known phase in LastState and LastSince.
func (s State) ViewAt(now time.Time) []AlertView {
	out := s.View()
	if !s.Stale(now) {
		return out
	}
	for i := range out {
		out[i].LastState, out[i].LastSince = out[i].State, out[i].Since
		out[i].State, out[i].Since = PhaseUnknown, s.EvaluatedAt
	}
	return out
}
