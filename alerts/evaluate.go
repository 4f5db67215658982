package alerts

import (
	"maps"
	"time"
)

// Evaluate runs every rule against snap and moves each (rule, source queue)
// pair one step through inactive -> pending -> firing -> resolved -> inactive.
// It returns the state to persist and the notifications to send: one firing
// alert when a pair fires, one resolved alert when it resolves, and a repeat
// of the firing alert every rs.RepeatInterval while it keeps firing. Nothing
// else is ever notified, however often Evaluate runs.
//
// Evaluate is pure: the same inputs give the same outputs, it reads no clock
// (time is snap.At) and does not modify prev. That is what lets any instance
// continue from the state another instance saved.
//
// rs should be valid (RuleSet.Validate); rules without a name or with an
// unknown kind are skipped. A pair whose rule is gone from rs, is disabled,
// or whose source queue is missing from snap counts as "condition false": a
// firing alert resolves (and is notified), a pending one is dropped.
func Evaluate(prev State, snap Snapshot, rs RuleSet) (next State, notifications []Alert) {
	e := newEvaluation(prev, snap, rs)
	for _, r := range rs.Rules {
		e.rule(r)
	}
	e.resolveRemoved()
	sortAlertStates(e.next.Alerts)
	sortAlerts(e.notifications)
	return e.next, e.notifications
}

// evaluation is one Evaluate call under way: the previous state by pair,
// the pairs evaluated so far, and what it returns.
type evaluation struct {
	prev State
	snap Snapshot
	rs   RuleSet
	now  time.Time
	old  map[stateKey]AlertState
	seen map[stateKey]bool

	next          State
	notifications []Alert
}

func newEvaluation(prev State, snap Snapshot, rs RuleSet) *evaluation {
	now := snap.At
	old := make(map[stateKey]AlertState, len(prev.Alerts))
	for _, a := range prev.Alerts {
		old[a.key()] = a
	}
	return &evaluation{
		prev: prev, snap: snap, rs: rs, now: now, old: old,
		seen: make(map[stateKey]bool, len(prev.Alerts)),
		next: State{Version: StateVersion, EvaluatedAt: now},
	}
}

// rule evaluates rule r: once for a global rule, per subject, or per
// source queue, those of the previous state included.
func (e *evaluation) rule(r Rule) {
	snap, rs, prev := e.snap, e.rs, e.prev
	if r.Name == "" || !r.Kind.Valid() {
		return
	}
	if r.Kind.Global() {
		e.step(r, "", "", snap.Capacity.UsedPercent(), "")
		return
	}
	if r.Kind.PerSubject() {
		for _, s := range subjects(r.Kind, snap) {
			e.step(r, "", s.name, s.value, s.detail)
		}
		// Subjects gone from the snapshot (a request decided or
		// expired, a policy removed) resolve.
		for _, a := range prev.Alerts {
			if a.Rule == r.Name && a.Subject != "" {
				e.step(r, "", a.Subject, 0, "")
			}
		}
		return
	}
	for _, q := range snap.Queues {
		e.step(rs.effective(r, q.SourceQueue), q.SourceQueue, "", measure(r.Kind, q), "")
	}
	// Queues that vanished from the snapshot (everything dealt with) are
	// measured as zero so their alerts resolve instead of hanging.
	for _, a := range prev.Alerts {
		if a.Rule == r.Name && a.SourceQueue != "" {
			e.step(rs.effective(r, a.SourceQueue), a.SourceQueue, "", 0, "")
		}
	}
}

// step evaluates one pair (rule, queue or subject) measured at value.
func (e *evaluation) step(r Rule, queue, subj string, value float64, detail string) {
	k := stateKey{r.Name, queue, subj}
	if e.seen[k] {
		return // a duplicated rule name, queue or subject: first one wins
	}
	e.seen[k] = true
	p, existed := e.old[k]
	if !existed {
		p = AlertState{Rule: r.Name, SourceQueue: queue, Subject: subj}
	}
	if !r.Disabled {
		// Keep what receivers see in sync with the configuration.
		p.Kind, p.Severity, p.Threshold = r.Kind, severityOf(r), r.Threshold
		p.Labels = maps.Clone(r.Labels)
		p.RunbookURL = e.rs.runbookOf(r)
	}
	if detail != "" {
		p.Detail = detail
	}
	active := !r.Disabled && value > r.Threshold
	n, keep, notify := transition(p, existed, active, value, e.now, r.For, e.rs.RepeatInterval)
	if keep {
		e.next.Alerts = append(e.next.Alerts, n)
	}
	if notify {
		e.notifications = append(e.notifications, newAlert(n))
	}
}

// resolveRemoved resolves the pairs whose rule left the configuration,
// with what the state remembers, so no receiver is left with an alert
// nobody will end.
func (e *evaluation) resolveRemoved() {
	for _, a := range e.prev.Alerts {
		if k := a.key(); !e.seen[k] {
			e.seen[k] = true
			if n, keep, notify := transition(a, true, false, 0, e.now, 0, 0); notify || keep {
				if keep {
					e.next.Alerts = append(e.next.Alerts, n)
				}
				if notify {
					e.notifications = append(e.notifications, newAlert(n))
				}
			}
		}
	}
}

// transition is the state machine for one pair. existed says whether p came
// from the previous state (otherwise the pair was inactive).
func transition(p AlertState, existed, active bool, value float64, now time.Time, hold, repeat time.Duration) (n AlertState, keep, notify bool) {
	n = p
	n.Value = value
	switch {
	case !existed:
		n.Phase = PhaseInactive
	case n.Phase != PhasePending && n.Phase != PhaseFiring && n.Phase != PhaseResolved:
		// A stored phase this version does not know: start the pair over
		// rather than keep an entry no transition would ever leave.
		n.Phase = PhaseInactive
	}
	if active {
		switch n.Phase {
		case PhaseInactive, PhaseResolved:
			// A new cycle: a resolved pair that turns true again is a new
			// incident with a new start, and must wait out For again.
			n.Phase, n.ActiveAt = PhasePending, now
			n.FiredAt, n.ResolvedAt, n.LastNotifiedAt = time.Time{}, time.Time{}, time.Time{}
			fallthrough
		case PhasePending:
			// hold <= 0 fires even if this instance's clock is behind the
			// one that stored ActiveAt.
			if hold <= 0 || now.Sub(n.ActiveAt) >= hold {
				n.Phase, n.FiredAt, n.LastNotifiedAt = PhaseFiring, now, now
				return n, true, true
			}
			return n, true, false
		case PhaseFiring:
			if repeat > 0 && now.Sub(n.LastNotifiedAt) >= repeat {
				n.LastNotifiedAt = now
				return n, true, true
			}
			return n, true, false
		}
		return n, true, false
	}
	switch n.Phase {
	case PhaseFiring:
		n.Phase, n.ResolvedAt, n.LastNotifiedAt = PhaseResolved, now, now
		return n, true, true
	default:
		// Pending that never held long enough goes back silently; resolved
		// has been notified and returns to inactive.
		return n, false, false
	}
}
