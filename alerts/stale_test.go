package alerts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// every fires at each multiple of d, as cron's @every does.
type every time.Duration

func (e every) Next(t time.Time) time.Time { return t.Truncate(time.Duration(e)).Add(time.Duration(e)) }

// TestStaleBound: a state turns stale three ticks of its schedule after
// its evaluation, plus the grace; a Checker with a schedule saves that in
// the state.
func TestStaleBound(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 10, 0, 5, 0, time.UTC)
	require.Equal(t, time.Date(2026, 1, 1, 10, 4, 0, 0, time.UTC), StaleBound(every(time.Minute), at),
		"ticks at 10:01, 10:02 and 10:03 missed, plus a minute")

	m := &memStore{}
	m.set(pending(at, map[string]int64{"orders": 500}))
	d, _ := newTestDispatcher(t)
	c, err := NewChecker(CheckerConfig{Logger: discardLogger(), Source: m, States: m, Dispatcher: d,
		Rules: DefaultRuleSet(), Schedule: every(time.Minute)})
	require.NoError(t, err)
	_, err = c.Check(t.Context())
	require.NoError(t, err)
	saved, err := m.LoadAlertState(t.Context())
	require.NoError(t, err)
	require.Equal(t, StaleBound(every(time.Minute), at), saved.StaleAfter.UTC())
	require.False(t, saved.Stale(at.Add(3*time.Minute)))
	require.True(t, saved.Stale(at.Add(5*time.Minute)))
}

// TestViewAtStale: a stale state shows no pair as firing: each is
// unknown since the last evaluation, with the phase it had then.
func TestViewAtStale(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s, _ := Evaluate(State{}, pending(at, map[string]int64{"orders": 500}), DefaultRuleSet())
	s.StaleAfter = StaleBound(every(time.Minute), at)
	fresh := s.ViewAt(at.Add(time.Minute))
	require.NotEmpty(t, fresh)
	for _, v := range fresh {
		require.NotEqual(t, PhaseUnknown, v.State)
		require.Empty(t, v.LastState)
	}
	stale := s.ViewAt(at.Add(time.Hour))
	require.Len(t, stale, len(fresh))
	for i, v := range stale {
		require.Equal(t, PhaseUnknown, v.State)
		require.Equal(t, at, v.Since, "unknown since the last evaluation")
		require.Equal(t, fresh[i].State, v.LastState)
		require.Equal(t, fresh[i].Since, v.LastSince)
	}
	require.False(t, State{}.Stale(at), "never evaluated")
}

// TestFiringGaugeDropsStaleState: dlq_alerts_firing reports a firing alert
// while its state is current, and 0 (with dlq_alerts_stale 1) once the
// state has gone stale, even with no new state read.
func TestFiringGaugeDropsStaleState(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	d, err := NewDispatcher(DispatcherConfig{Logger: discardLogger(), Registerer: reg, RuleNames: []string{"pending_count"}})
	require.NoError(t, err)
	now := time.Now()
	s, _ := Evaluate(State{}, pending(now, map[string]int64{"orders": 500}), RuleSet{Rules: []Rule{
		{Name: "pending_count", Kind: KindPendingCount, Threshold: 100, Severity: "warning"}}})
	s.StaleAfter = now.Add(500 * time.Millisecond)
	d.SetFiring(s)
	gauges := func(firing, stale int) string {
		return fmt.Sprintf(`
# HELP dlq_alerts_firing Alerts currently firing, by rule (one per source queue, policy or approval request, one for global rules).
# TYPE dlq_alerts_firing gauge
dlq_alerts_firing{rule="pending_count"} %d
# HELP dlq_alerts_stale 1 when the saved alert state is stale: no instance has evaluated alerts for several ticks of the alerts job's schedule (job off or not running), so no alert is reported firing.
# TYPE dlq_alerts_stale gauge
dlq_alerts_stale %d
`, firing, stale)
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(gauges(1, 0)), "dlq_alerts_firing", "dlq_alerts_stale"))
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		return testutil.GatherAndCompare(reg, strings.NewReader(gauges(0, 1)), "dlq_alerts_firing", "dlq_alerts_stale") == nil
	}, "the stale state is still reported firing")
}
