package alerts

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sim drives Evaluate over simulated time. Between evaluations the state
// goes through JSON, as it does when the caller stores it in PostgreSQL and
// another instance picks it up.
type sim struct {
	t     *testing.T
	rs    RuleSet
	state State
	sent  []Alert
}

func newSim(t *testing.T, rs RuleSet) *sim {
	t.Helper()
	require.NoError(t, rs.Validate())
	return &sim{t: t, rs: rs}
}

func (s *sim) eval(snap Snapshot) []Alert {
	s.t.Helper()
	b, err := json.Marshal(s.state)
	require.NoError(s.t, err)
	var prev State
	require.NoError(s.t, json.Unmarshal(b, &prev))
	next, notes := Evaluate(prev, snap, s.rs)
	s.state = next
	s.sent = append(s.sent, notes...)
	return notes
}

func rules(names ...string) []Rule {
	var out []Rule
	for _, r := range DefaultRules() {
		for _, n := range names {
			if r.Name == n {
				out = append(out, r)
			}
		}
	}
	return out
}

func pending(at time.Time, perQueue map[string]int64) Snapshot {
	s := Snapshot{At: at}
	for q, n := range perQueue {
		s.Queues = append(s.Queues, QueueStats{SourceQueue: q, Pending: n})
	}
	return s
}

func phaseOf(s State, rule, queue string) Phase {
	for _, a := range s.Alerts {
		if a.Rule == rule && a.SourceQueue == queue {
			return a.Phase
		}
	}
	return PhaseInactive
}

func TestEvaluateFireHoldResolve(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("pending_count")})

	notes := s.eval(pending(t0, map[string]int64{"orders": 150}))
	require.Len(t, notes, 1, "For 0 fires on the first evaluation")
	a := notes[0]
	require.Equal(t, StatusFiring, a.Status)
	require.Equal(t, "pending_count", a.Rule)
	require.Equal(t, "orders", a.SourceQueue)
	require.Equal(t, 150.0, a.Value)
	require.Equal(t, 100.0, a.Threshold)
	require.Equal(t, t0, a.StartsAt)
	require.True(t, a.EndsAt.IsZero())

	for i := 1; i <= 30; i++ {
		require.Empty(t, s.eval(pending(t0.Add(time.Duration(i)*time.Minute), map[string]int64{"orders": 150 + int64(i)})),
			"held firing alert at minute %d must not notify again", i)
	}
	require.Equal(t, PhaseFiring, phaseOf(s.state, "pending_count", "orders"))
	require.Equal(t, 180.0, s.state.Alerts[0].Value, "value follows the snapshot while firing")

	resolveAt := t0.Add(31 * time.Minute)
	notes = s.eval(pending(resolveAt, map[string]int64{"orders": 20}))
	require.Len(t, notes, 1)
	require.Equal(t, StatusResolved, notes[0].Status)
	require.Equal(t, t0, notes[0].StartsAt, "resolve carries the incident's start")
	require.Equal(t, resolveAt, notes[0].EndsAt)
	require.Equal(t, 20.0, notes[0].Value)
	require.Equal(t, PhaseResolved, phaseOf(s.state, "pending_count", "orders"))

	for i := 32; i < 60; i++ {
		require.Empty(t, s.eval(pending(t0.Add(time.Duration(i)*time.Minute), map[string]int64{"orders": 20})))
	}
	require.Empty(t, s.state.Alerts, "resolved returns to inactive, which is not stored")
	require.Len(t, s.sent, 2)
}

func TestEvaluateHoldsForDuration(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("depth_nonzero")})

	for i := 0; i < 5; i++ {
		require.Empty(t, s.eval(pending(t0.Add(time.Duration(i)*time.Minute), map[string]int64{"orders": 1})))
		require.Equal(t, PhasePending, phaseOf(s.state, "depth_nonzero", "orders"), "minute %d", i)
	}
	require.Equal(t, t0, s.state.View()[0].Since, "pending since the condition turned true")

	notes := s.eval(pending(t0.Add(5*time.Minute), map[string]int64{"orders": 1}))
	require.Len(t, notes, 1, "fires once the condition held for 5m")
	require.Equal(t, StatusFiring, notes[0].Status)
	require.Equal(t, t0.Add(5*time.Minute), notes[0].StartsAt)
	require.Equal(t, PhaseFiring, phaseOf(s.state, "depth_nonzero", "orders"))
}

func TestEvaluateShortBlipDoesNotFire(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("depth_nonzero")})

	// True for 4 minutes, then false: shorter than For.
	for i := 0; i < 4; i++ {
		s.eval(pending(t0.Add(time.Duration(i)*time.Minute), map[string]int64{"orders": 3}))
	}
	s.eval(pending(t0.Add(4*time.Minute), map[string]int64{"orders": 0}))
	require.Empty(t, s.state.Alerts, "pending goes back to inactive silently")

	// True again: the hold starts over rather than adding up blips.
	for i := 5; i < 9; i++ {
		s.eval(pending(t0.Add(time.Duration(i)*time.Minute), map[string]int64{"orders": 3}))
	}
	require.Equal(t, PhasePending, phaseOf(s.state, "depth_nonzero", "orders"))
	require.Equal(t, t0.Add(5*time.Minute), s.state.Alerts[0].ActiveAt)
	require.Empty(t, s.sent)
}

func TestEvaluateThresholdIsStrict(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("pending_count")})
	require.Empty(t, s.eval(pending(t0, map[string]int64{"orders": 100})))
	require.Empty(t, s.state.Alerts)
	require.Len(t, s.eval(pending(t0.Add(time.Minute), map[string]int64{"orders": 101})), 1)
}

func TestEvaluateKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule    string
		below   QueueStats
		above   QueueStats
		wantVal float64
	}{
		{"pending_count", QueueStats{Pending: 100}, QueueStats{Pending: 101}, 101},
		{"oldest_pending_age", QueueStats{Pending: 1, OldestPending: 24 * time.Hour}, QueueStats{Pending: 1, OldestPending: 25 * time.Hour}, 90000},
		{"repeat_failures", QueueStats{Pending: 5}, QueueStats{Pending: 5, RepeatFailures: 1}, 1},
		{"ingest_spike", QueueStats{NewLast5m: 1000}, QueueStats{NewLast5m: 1001}, 1001},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, RuleSet{Rules: rules(tt.rule)})
			tt.below.SourceQueue, tt.above.SourceQueue = "orders", "orders"
			require.Empty(t, s.eval(Snapshot{At: t0, Queues: []QueueStats{tt.below}}))
			notes := s.eval(Snapshot{At: t0.Add(time.Minute), Queues: []QueueStats{tt.above}})
			require.Len(t, notes, 1)
			require.Equal(t, tt.wantVal, notes[0].Value)
			require.Equal(t, StatusFiring, notes[0].Status)
			require.NotEmpty(t, notes[0].Annotations[AnnotationSummary])
			require.Contains(t, notes[0].Annotations[AnnotationDescription], `"orders"`)
		})
	}
}

func TestEvaluateCapacity(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("capacity", "pending_count")})

	cap := func(at time.Time, msgs, bytes int64) Snapshot {
		return Snapshot{At: at, Capacity: CapacityStats{Messages: msgs, MaxMessages: 1000, Bytes: bytes, MaxBytes: 1 << 30}}
	}
	require.Empty(t, s.eval(cap(t0, 900, 0)), "90% is not above 90%")

	notes := s.eval(cap(t0.Add(time.Minute), 100, 1<<30-1<<20))
	require.Len(t, notes, 1, "bytes alone can fire it")
	a := notes[0]
	require.Equal(t, "capacity", a.Rule)
	require.Empty(t, a.SourceQueue, "capacity is global")
	require.NotContains(t, a.Labels, LabelSourceQueue)
	require.Equal(t, SeverityCritical, a.Labels[LabelSeverity])
	require.InDelta(t, 99.9, a.Value, 0.01)
	require.Contains(t, a.Annotations[AnnotationSummary], "99.9%")

	require.Empty(t, s.eval(cap(t0.Add(2*time.Minute), 950, 0)), "still above via messages")
	notes = s.eval(cap(t0.Add(3*time.Minute), 10, 10))
	require.Len(t, notes, 1)
	require.Equal(t, StatusResolved, notes[0].Status)

	// No cap configured never alerts.
	require.Empty(t, s.eval(Snapshot{At: t0.Add(5 * time.Minute), Capacity: CapacityStats{Messages: 1e9, Bytes: 1e12}}))
}

func TestEvaluatePerQueueOverride(t *testing.T) {
	t.Parallel()
	thousand, zero, off := 1000.0, time.Duration(0), true
	s := newSim(t, RuleSet{
		Rules: rules("pending_count", "depth_nonzero"),
		Overrides: Overrides{
			"orders":  {"pending_count": {Threshold: &thousand}, "depth_nonzero": {Disabled: &off}},
			"billing": {"depth_nonzero": {For: &zero}},
		},
	})

	notes := s.eval(pending(t0, map[string]int64{"orders": 500, "billing": 500, "mail": 500}))
	var got []string
	for _, a := range notes {
		got = append(got, a.Rule+"/"+a.SourceQueue)
	}
	require.Equal(t, []string{"depth_nonzero/billing", "pending_count/billing", "pending_count/mail"}, got,
		"orders has a higher threshold and no depth rule; billing's depth rule has no hold")
	require.Equal(t, PhasePending, phaseOf(s.state, "depth_nonzero", "mail"), "mail keeps the default 5m hold")
	require.Equal(t, PhaseInactive, phaseOf(s.state, "depth_nonzero", "orders"))

	notes = s.eval(pending(t0.Add(time.Minute), map[string]int64{"orders": 1001, "billing": 500, "mail": 500}))
	require.Len(t, notes, 1)
	require.Equal(t, "orders", notes[0].SourceQueue)
	require.Equal(t, 1000.0, notes[0].Threshold, "the alert reports the threshold that applied")
}

func TestEvaluateOverrideEnablesDisabledRule(t *testing.T) {
	t.Parallel()
	on := false
	r := rules("pending_count")
	r[0].Disabled = true
	s := newSim(t, RuleSet{Rules: r, Overrides: Overrides{"orders": {"pending_count": {Disabled: &on}}}})
	notes := s.eval(pending(t0, map[string]int64{"orders": 500, "billing": 500}))
	require.Len(t, notes, 1)
	require.Equal(t, "orders", notes[0].SourceQueue)
}

func TestEvaluateRepeatInterval(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		repeat time.Duration
		want   int
	}{{0, 1}, {4 * time.Hour, 3}, {time.Hour, 10}} {
		t.Run(fmt.Sprint(tt.repeat), func(t *testing.T) {
			t.Parallel()
			s := newSim(t, RuleSet{Rules: rules("pending_count"), RepeatInterval: tt.repeat})
			var firing []Alert
			for i := 0; i < 10*60; i++ { // ten hours, one evaluation a minute
				firing = append(firing, s.eval(pending(t0.Add(time.Duration(i)*time.Minute), map[string]int64{"orders": 500}))...)
			}
			require.Len(t, firing, tt.want)
			for _, a := range firing {
				require.Equal(t, StatusFiring, a.Status)
				require.Equal(t, t0, a.StartsAt, "repeats keep the start so receivers see one incident")
			}
			require.Equal(t, t0.Add(time.Duration(tt.want-1)*tt.repeat), s.state.Alerts[0].LastNotifiedAt)
		})
	}
}

func TestEvaluateQueueDisappearsResolves(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("pending_count", "depth_nonzero")})
	s.eval(pending(t0, map[string]int64{"orders": 500}))
	require.Equal(t, PhaseFiring, phaseOf(s.state, "pending_count", "orders"))
	require.Equal(t, PhasePending, phaseOf(s.state, "depth_nonzero", "orders"))

	notes := s.eval(Snapshot{At: t0.Add(time.Minute)})
	require.Len(t, notes, 1)
	require.Equal(t, StatusResolved, notes[0].Status)
	require.Equal(t, 0.0, notes[0].Value)
	require.Equal(t, PhaseInactive, phaseOf(s.state, "depth_nonzero", "orders"))
}

func TestEvaluateRuleRemovedOrDisabledResolves(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("pending_count", "ingest_spike")})
	snap := func(at time.Time) Snapshot {
		return Snapshot{At: at, Queues: []QueueStats{{SourceQueue: "orders", Pending: 500, NewLast5m: 5000}}}
	}
	require.Len(t, s.eval(snap(t0)), 2)

	// Operator removes ingest_spike and disables pending_count for orders.
	off := true
	s.rs = RuleSet{Rules: rules("pending_count"), Overrides: Overrides{"orders": {"pending_count": {Disabled: &off}}}}
	notes := s.eval(snap(t0.Add(time.Minute)))
	require.Len(t, notes, 2)
	for _, a := range notes {
		require.Equal(t, StatusResolved, a.Status, a.Rule)
		require.Equal(t, "orders", a.Labels[LabelSourceQueue])
	}
	require.Equal(t, "ingest_spike", notes[0].Rule)
	require.Equal(t, 1000.0, notes[0].Threshold, "a removed rule resolves with the threshold it had")

	for i := 2; i < 10; i++ {
		require.Empty(t, s.eval(snap(t0.Add(time.Duration(i)*time.Minute))))
	}
	require.Empty(t, s.state.Alerts)
}

func TestEvaluateNewIncidentAfterResolve(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("depth_nonzero"), RepeatInterval: time.Hour})
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	for m := 0; m <= 5; m++ {
		s.eval(pending(at(m), map[string]int64{"orders": 1}))
	}
	require.Len(t, s.sent, 1)
	s.eval(pending(at(6), map[string]int64{"orders": 0}))
	require.Len(t, s.sent, 2)
	require.Equal(t, StatusResolved, s.sent[1].Status)

	// True again right after resolving: a new incident that waits out For.
	for m := 7; m < 12; m++ {
		require.Empty(t, s.eval(pending(at(m), map[string]int64{"orders": 1})), "minute %d", m)
	}
	notes := s.eval(pending(at(12), map[string]int64{"orders": 1}))
	require.Len(t, notes, 1)
	require.Equal(t, at(12), notes[0].StartsAt)
	require.True(t, s.state.Alerts[0].ResolvedAt.IsZero(), "the new incident carries nothing of the old one")
}

func TestEvaluateAlertLabelsAndAnnotations(t *testing.T) {
	t.Parallel()
	r := rules("pending_count")
	r[0].Labels = map[string]string{"team": "payments"}
	s := newSim(t, RuleSet{Rules: r})
	notes := s.eval(pending(t0, map[string]int64{"orders": 150}))
	require.Len(t, notes, 1)
	require.Equal(t, map[string]string{
		"alertname": "pending_count", "service": "dlq", "severity": "warning", "source_queue": "orders", "team": "payments",
	}, notes[0].Labels)
	require.Equal(t, `150 dead messages pending from "orders"`, notes[0].Annotations[AnnotationSummary])
	require.Contains(t, notes[0].Annotations[AnnotationDescription], "threshold of 100")

	notes = s.eval(pending(t0.Add(time.Minute), map[string]int64{"orders": 3}))
	require.Len(t, notes, 1)
	require.Contains(t, notes[0].Annotations[AnnotationSummary], "back to normal")
	require.Equal(t, "payments", notes[0].Labels["team"])
}

func TestEvaluateIsPure(t *testing.T) {
	t.Parallel()
	rs := RuleSet{Rules: DefaultRules(), RepeatInterval: time.Hour}
	prev, _ := Evaluate(State{}, pending(t0, map[string]int64{"orders": 500, "billing": 1}), rs)
	before, err := json.Marshal(prev)
	require.NoError(t, err)

	snap := pending(t0.Add(10*time.Minute), map[string]int64{"billing": 2})
	n1, a1 := Evaluate(prev, snap, rs)
	n2, a2 := Evaluate(prev, snap, rs)
	require.Equal(t, n1, n2)
	require.Equal(t, a1, a2)
	after, err := json.Marshal(prev)
	require.NoError(t, err)
	require.JSONEq(t, string(before), string(after), "prev must not be modified")
}

// TestEvaluateNoDuplicateNotifications runs many random histories and checks
// what receivers would see: per pair, firing and resolved strictly alternate,
// starting with firing, and each notification matches a real transition of
// the condition.
func TestEvaluateNoDuplicateNotifications(t *testing.T) {
	t.Parallel()
	queues := []string{"orders", "billing", "mail"}
	total := 0
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 42))
		rs := RuleSet{Rules: DefaultRules()}
		s := newSim(t, rs)
		last := map[stateKey]Status{}
		for i := range 200 {
			// Sticky random walks so conditions hold for a while, then flip.
			snap := Snapshot{At: t0.Add(time.Duration(i) * time.Minute)}
			for _, q := range queues {
				if rng.IntN(4) == 0 {
					continue // queue absent this tick
				}
				snap.Queues = append(snap.Queues, QueueStats{
					SourceQueue: q, Pending: int64(rng.IntN(3) * 60), NewLast5m: int64(rng.IntN(2) * 1500),
					RepeatFailures: int64(rng.IntN(2)), OldestPending: time.Duration(rng.IntN(3)) * 20 * time.Hour,
				})
			}
			snap.Capacity = CapacityStats{Messages: int64(rng.IntN(100)), MaxMessages: 100}
			for _, a := range s.eval(snap) {
				total++
				k := stateKey{a.Rule, a.SourceQueue, a.Subject}
				want := StatusFiring
				if last[k] == StatusFiring {
					want = StatusResolved
				}
				require.Equal(t, want, a.Status, "seed %d tick %d %v: notifications must alternate", seed, i, k)
				last[k] = a.Status
				if a.Status == StatusFiring {
					require.Equal(t, snap.At, a.StartsAt)
				} else {
					require.Equal(t, snap.At, a.EndsAt)
				}
			}
			for _, st := range s.state.Alerts {
				if st.Phase == PhaseFiring {
					require.Equal(t, StatusFiring, last[st.key()], "seed %d: a firing pair was notified", seed)
				}
			}
		}
	}
	require.Greater(t, total, 1000, "the histories must exercise many transitions")
}

func TestStateView(t *testing.T) {
	t.Parallel()
	rs := RuleSet{Rules: rules("pending_count", "depth_nonzero")}
	s, _ := Evaluate(State{}, pending(t0, map[string]int64{"orders": 500}), rs)
	v := s.View()
	require.Equal(t, []AlertView{
		{Rule: "depth_nonzero", Kind: KindDepthNonzero, SourceQueue: "orders", State: PhasePending, Since: t0, Severity: "warning", Value: 500, Threshold: 0},
		{Rule: "pending_count", Kind: KindPendingCount, SourceQueue: "orders", State: PhaseFiring, Since: t0, Severity: "warning", Value: 500, Threshold: 100, LastNotified: t0},
	}, v)

	b, err := json.Marshal(v[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"rule":"depth_nonzero","kind":"depth_nonzero","source_queue":"orders","state":"pending",
		"since":"2026-03-01T12:00:00Z","severity":"warning","value":500,"threshold":0}`, string(b))
	require.Equal(t, map[string]int{"pending_count": 1}, s.FiringCount())
}

func TestEvaluateUnknownStoredPhaseStartsOver(t *testing.T) {
	t.Parallel()
	prev := State{Alerts: []AlertState{{Rule: "pending_count", Kind: KindPendingCount, SourceQueue: "orders", Phase: "exploded"}}}
	rs := RuleSet{Rules: rules("pending_count")}

	next, notes := Evaluate(prev, pending(t0, map[string]int64{"orders": 500}), rs)
	require.Len(t, notes, 1)
	require.Equal(t, StatusFiring, notes[0].Status)
	require.Equal(t, PhaseFiring, phaseOf(next, "pending_count", "orders"))

	next, notes = Evaluate(prev, pending(t0, map[string]int64{"orders": 5}), rs)
	require.Empty(t, notes)
	require.Empty(t, next.Alerts)
}
