package alerts

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newTestDispatcher returns a Dispatcher with backoffs short enough for
// tests and its registry.
func newTestDispatcher(t *testing.T, notifiers ...Notifier) (*Dispatcher, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	d, err := NewDispatcher(DispatcherConfig{
		Logger: discardLogger(), Registerer: reg, Notifiers: notifiers,
		InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
	})
	require.NoError(t, err)
	return d, reg
}

func notificationCount(d *Dispatcher, notifier, result string) float64 {
	return testutil.ToFloat64(d.notifications.WithLabelValues(notifier, result))
}

func TestDispatcherRetriesOn500Then200(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusInternalServerError, http.StatusOK)
	wh, err := NewWebhookNotifier(WebhookConfig{URL: rcv.URL})
	require.NoError(t, err)
	d, _ := newTestDispatcher(t, wh)
	firing, _ := sampleAlerts(t)

	require.NoError(t, d.Dispatch(t.Context(), State{}, []Alert{firing}))
	reqs := rcv.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, reqs[0].Body, reqs[1].Body, "a retry sends the same alerts")
	require.Equal(t, 1.0, notificationCount(d, "webhook", ResultRetry))
	require.Equal(t, 1.0, notificationCount(d, "webhook", ResultSuccess))
	require.Equal(t, 0.0, notificationCount(d, "webhook", ResultFailure))
	require.Equal(t, 1.0, notificationCount(d, "log", ResultSuccess))
}

func TestDispatcherNoRetryOn400(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusBadRequest)
	sl, err := NewSlackNotifier(SlackConfig{URL: rcv.URL})
	require.NoError(t, err)
	d, _ := newTestDispatcher(t, sl)
	firing, _ := sampleAlerts(t)

	err = d.Dispatch(t.Context(), State{}, []Alert{firing})
	require.ErrorContains(t, err, "alerts: notify slack (1 alerts) gave up after attempt 1, not retryable")
	require.ErrorContains(t, err, "status 400")
	require.Len(t, rcv.requests(), 1)
	require.Equal(t, 1.0, notificationCount(d, "slack", ResultFailure))
	require.Equal(t, 0.0, notificationCount(d, "slack", ResultRetry))
}

func TestDispatcherGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusServiceUnavailable)
	wh, err := NewWebhookNotifier(WebhookConfig{URL: rcv.URL})
	require.NoError(t, err)
	d, err := NewDispatcher(DispatcherConfig{
		Logger: discardLogger(), Registerer: prometheus.NewRegistry(), Notifiers: []Notifier{wh},
		MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
	})
	require.NoError(t, err)
	firing, _ := sampleAlerts(t)

	err = d.Dispatch(t.Context(), State{}, []Alert{firing})
	require.ErrorContains(t, err, "gave up after attempt 3, out of attempts")
	require.Len(t, rcv.requests(), 3)
	require.Equal(t, 2.0, notificationCount(d, "webhook", ResultRetry))
	require.Equal(t, 1.0, notificationCount(d, "webhook", ResultFailure))
}

// A delivery given up while the receiver was down (retryable, out of
// attempts) goes again, before the new notifications, at the next
// evaluation: the state that made it was saved already, so nothing else
// would send it (a resolve would never reach the receiver). A refusal that
// is not retryable is not kept.
func TestDispatcherSendsUndeliveredNextTime(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusOK)
	wh, err := NewWebhookNotifier(WebhookConfig{URL: rcv.URL})
	require.NoError(t, err)
	d, err := NewDispatcher(DispatcherConfig{
		Logger: discardLogger(), Registerer: prometheus.NewRegistry(), Notifiers: []Notifier{wh},
		MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
	})
	require.NoError(t, err)
	firing, resolved := sampleAlerts(t)

	require.ErrorContains(t, d.Dispatch(t.Context(), State{}, []Alert{firing}), "out of attempts")
	require.NoError(t, d.Dispatch(t.Context(), State{}, []Alert{resolved}))
	reqs := rcv.requests()
	require.Len(t, reqs, 3)
	var sent struct{ Alerts []Alert }
	rcv.body(t, 2, &sent)
	require.Len(t, sent.Alerts, 2, "the undelivered fire, then the new note")
	require.Equal(t, firing.Rule, sent.Alerts[0].Rule)
	require.Equal(t, StatusFiring, sent.Alerts[0].Status)
	require.Equal(t, StatusResolved, sent.Alerts[1].Status)

	require.NoError(t, d.Dispatch(t.Context(), State{}, nil))
	require.Len(t, rcv.requests(), 3, "delivered: nothing kept")

	// Not retryable: not kept.
	bad := newReceiver(t, http.StatusBadRequest)
	sl, err := NewSlackNotifier(SlackConfig{URL: bad.URL})
	require.NoError(t, err)
	d2, _ := newTestDispatcher(t, sl)
	require.Error(t, d2.Dispatch(t.Context(), State{}, []Alert{firing}))
	require.NoError(t, d2.Dispatch(t.Context(), State{}, nil))
	require.Len(t, bad.requests(), 1)
}

// signalling wraps a notifier and reports each finished attempt, so a test
// knows the Dispatcher is waiting to retry.
type signalling struct {
	Notifier
	done chan error
}

func (s signalling) Notify(ctx context.Context, alerts ...Alert) (bool, error) {
	retryable, err := s.Notifier.Notify(ctx, alerts...)
	s.done <- err
	return retryable, err
}

func TestDispatcherContextCancelStopsRetries(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusInternalServerError)
	wh, err := NewWebhookNotifier(WebhookConfig{URL: rcv.URL})
	require.NoError(t, err)
	attempts := make(chan error, 100)
	d, err := NewDispatcher(DispatcherConfig{
		Logger: discardLogger(), Registerer: prometheus.NewRegistry(), Notifiers: []Notifier{signalling{wh, attempts}},
		MaxAttempts: 100, InitialBackoff: time.Hour, MaxBackoff: time.Hour,
	})
	require.NoError(t, err)
	firing, _ := sampleAlerts(t)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Dispatch(ctx, State{}, []Alert{firing}) }()
	select {
	case err := <-attempts:
		require.ErrorContains(t, err, "status 500")
	case <-time.After(10 * time.Second):
		t.Fatal("the first attempt never finished")
	}
	cancel() // the Dispatcher now sits in an hour-long backoff
	select {
	case err := <-done:
		// Cancelled while waiting to retry, or, when the cancel comes
		// before the Dispatcher has looked at its context again, right
		// after the attempt: either way after attempt 1, and cancelled.
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "cancelled")
		require.ErrorContains(t, err, "after attempt 1")
	case <-time.After(10 * time.Second):
		t.Fatal("Dispatch kept waiting after its context was cancelled")
	}
	require.Len(t, rcv.requests(), 1)
	require.Equal(t, 1.0, notificationCount(d, "webhook", ResultFailure))
}

// scriptedNotifier fails retryably n times, recording when it was called.
type scriptedNotifier struct {
	name     string
	failures int
	mu       sync.Mutex
	calls    []time.Time
	batches  [][]Alert
}

func (s *scriptedNotifier) Name() string { return s.name }

func (s *scriptedNotifier) Notify(_ context.Context, alerts ...Alert) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, time.Now())
	s.batches = append(s.batches, alerts)
	if len(s.calls) <= s.failures {
		return true, errors.New("scripted failure")
	}
	return false, nil
}

func TestDispatcherBackoffDoublesUpToMax(t *testing.T) {
	t.Parallel()
	n := &scriptedNotifier{name: "scripted", failures: 4}
	d, err := NewDispatcher(DispatcherConfig{
		Logger: discardLogger(), Registerer: prometheus.NewRegistry(), Notifiers: []Notifier{n},
		MaxAttempts: 5, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	firing, _ := sampleAlerts(t)
	require.NoError(t, d.Dispatch(t.Context(), State{}, []Alert{firing}))

	require.Len(t, n.calls, 5)
	for i, min := range []time.Duration{5, 10, 20, 20} {
		gap := n.calls[i+1].Sub(n.calls[i])
		require.GreaterOrEqual(t, gap, min*time.Millisecond, "wait before attempt %d", i+2)
	}
}

func TestDispatcherRefreshesFiringAlertsForAlertmanager(t *testing.T) {
	t.Parallel()
	am := newReceiver(t)
	amn, err := NewAlertmanagerNotifier(AlertmanagerConfig{URL: am.URL})
	require.NoError(t, err)
	plain := &scriptedNotifier{name: "plain"}
	d, _ := newTestDispatcher(t, amn, plain)

	rs := RuleSet{Rules: rules("pending_count")}
	st, notes := Evaluate(State{}, pending(t0, map[string]int64{"orders": 500, "billing": 500}), rs)
	require.NoError(t, d.Dispatch(t.Context(), st, notes))
	require.Len(t, plain.batches, 1)
	require.Len(t, plain.batches[0], 2)

	// Nothing changes: only Alertmanager hears, and hears both again.
	st, notes = Evaluate(st, pending(t0.Add(time.Minute), map[string]int64{"orders": 500, "billing": 500}), rs)
	require.Empty(t, notes)
	require.NoError(t, d.Dispatch(t.Context(), st, notes))
	require.Len(t, plain.batches, 1)
	var got []AlertmanagerAlert
	am.body(t, 1, &got)
	require.Len(t, got, 2)

	// billing resolves: Alertmanager gets the resolve plus orders still firing.
	st, notes = Evaluate(st, pending(t0.Add(2*time.Minute), map[string]int64{"orders": 500}), rs)
	require.Len(t, notes, 1)
	require.NoError(t, d.Dispatch(t.Context(), st, notes))
	require.Len(t, plain.batches, 2)
	require.Len(t, plain.batches[1], 1)
	am.body(t, 2, &got)
	require.Len(t, got, 2)
	require.Equal(t, "billing", got[0].Labels[LabelSourceQueue])
	require.Equal(t, t0.Add(2*time.Minute), got[0].EndsAt)
	require.Equal(t, "orders", got[1].Labels[LabelSourceQueue])

	// All quiet: nobody is called at all.
	st, notes = Evaluate(st, pending(t0.Add(3*time.Minute), nil), rs)
	require.Len(t, notes, 1)
	st, notes = Evaluate(st, pending(t0.Add(4*time.Minute), nil), rs)
	require.NoError(t, d.Dispatch(t.Context(), st, notes))
	require.Len(t, am.requests(), 3)
	require.Len(t, plain.batches, 2)
}

func TestDispatcherMetrics(t *testing.T) {
	t.Parallel()
	wh := &scriptedNotifier{name: "team_webhook"}
	d, reg := newTestDispatcher(t, wh)

	// Zero series exist before anything fires.
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP dlq_alerts_firing Alerts currently firing, by rule (one per source queue, policy or approval request, one for global rules).
# TYPE dlq_alerts_firing gauge
dlq_alerts_firing{rule="approval_pending"} 0
dlq_alerts_firing{rule="auto_exhausted"} 0
dlq_alerts_firing{rule="capacity"} 0
dlq_alerts_firing{rule="depth_nonzero"} 0
dlq_alerts_firing{rule="ingest_spike"} 0
dlq_alerts_firing{rule="oldest_pending_age"} 0
dlq_alerts_firing{rule="pending_count"} 0
dlq_alerts_firing{rule="policy_paused"} 0
dlq_alerts_firing{rule="repeat_failures"} 0
`), "dlq_alerts_firing"))
	require.Equal(t, 6, testutil.CollectAndCount(d.notifications), "log and team_webhook × success, retry, failure")

	rs := DefaultRuleSet()
	st, _ := Evaluate(State{}, pending(t0, map[string]int64{"orders": 500, "billing": 500}), rs)
	d.SetFiring(st)
	require.Equal(t, 2.0, testutil.ToFloat64(d.firing.WithLabelValues("pending_count")))
	require.Equal(t, 0.0, testutil.ToFloat64(d.firing.WithLabelValues("depth_nonzero")), "pending is not firing")

	st, _ = Evaluate(st, pending(t0.Add(time.Minute), map[string]int64{"orders": 500}), rs)
	d.SetFiring(st)
	require.Equal(t, 1.0, testutil.ToFloat64(d.firing.WithLabelValues("pending_count")))

	// A rule outside the pre-created names gets a series, and it returns to
	// zero when the rule is gone.
	d.SetFiring(State{Alerts: []AlertState{{Rule: "custom", Phase: PhaseFiring}}})
	require.Equal(t, 1.0, testutil.ToFloat64(d.firing.WithLabelValues("custom")))
	require.Equal(t, 0.0, testutil.ToFloat64(d.firing.WithLabelValues("pending_count")))
	d.SetFiring(State{})
	require.Equal(t, 0.0, testutil.ToFloat64(d.firing.WithLabelValues("custom")))

	// A second Dispatcher on the same registry shares the metrics.
	d2, err := NewDispatcher(DispatcherConfig{Logger: discardLogger(), Registerer: reg})
	require.NoError(t, err)
	require.Same(t, d.firing, d2.firing)
}

func TestDispatcherConfigValidation(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a := &scriptedNotifier{name: "a"}
	for _, tt := range []struct {
		cfg  DispatcherConfig
		want string
	}{
		{DispatcherConfig{Registerer: reg}, "alerts: dispatcher config: logger: required"},
		{DispatcherConfig{Logger: discardLogger()}, "alerts: dispatcher config: registerer: required"},
		{DispatcherConfig{Logger: discardLogger(), Registerer: reg, MaxAttempts: -1}, "alerts: dispatcher config: max_attempts: must be >= 1, got -1"},
		{DispatcherConfig{Logger: discardLogger(), Registerer: reg, InitialBackoff: time.Minute, MaxBackoff: time.Second},
			"alerts: dispatcher config: initial_backoff, max_backoff: need 0 <= initial_backoff <= max_backoff, got 1m0s and 1s"},
		{DispatcherConfig{Logger: discardLogger(), Registerer: reg, Notifiers: []Notifier{a, a}}, `alerts: dispatcher config: notifiers[1]: name "a" is already used`},
		{DispatcherConfig{Logger: discardLogger(), Registerer: reg, Notifiers: []Notifier{&scriptedNotifier{name: "log"}}}, `alerts: dispatcher config: notifiers[0]: name "log" is already used`},
		{DispatcherConfig{Logger: discardLogger(), Registerer: reg, Notifiers: []Notifier{nil}}, "alerts: dispatcher config: notifiers[0]: is nil"},
	} {
		_, err := NewDispatcher(tt.cfg)
		require.EqualError(t, err, tt.want)
	}
}

func TestDispatcherLogsEveryAlert(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	d, err := NewDispatcher(DispatcherConfig{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	firing, resolved := sampleAlerts(t)
	require.NoError(t, d.Dispatch(t.Context(), State{}, []Alert{firing, resolved}))
	require.Contains(t, buf.String(), "alert firing: ")
	require.Contains(t, buf.String(), "alert resolved: ")
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var _ io.Writer = (*syncBuffer)(nil)
