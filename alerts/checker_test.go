package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// memStore keeps the state as JSON bytes, as the PostgreSQL store does, and
// serves a settable snapshot. It stands in for the store only; the receivers
// in these tests are real HTTP servers.
type memStore struct {
	mu      sync.Mutex
	saved   []byte
	snap    Snapshot
	saveErr error
	saves   int
}

func (m *memStore) AlertSnapshot(context.Context) (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap, nil
}

func (m *memStore) LoadAlertState(context.Context) (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s State
	if m.saved == nil {
		return s, nil
	}
	return s, json.Unmarshal(m.saved, &s)
}

func (m *memStore) SaveAlertState(_ context.Context, s State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.saveErr != nil {
		return m.saveErr
	}
	b, err := json.Marshal(s)
	m.saved, m.saves = b, m.saves+1
	return err
}

func (m *memStore) set(s Snapshot) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snap = s
}

// TestCheckerAcrossInstances runs the alert check the way the scheduler
// does: each tick on one of three instances, sharing only the store, with
// real webhook, Slack and Alertmanager receivers.
func TestCheckerAcrossInstances(t *testing.T) {
	t.Parallel()
	webhook, slack, am := newReceiver(t), newReceiver(t), newReceiver(t)
	store := &memStore{}
	cfg := parse(t, `
alerts:
  webhooks: [{url: "`+webhook.URL+`"}]
  slack: [{url: "`+slack.URL+`"}]
  alertmanagers: [{url: "`+am.URL+`"}]
`)
	require.NoError(t, cfg.Validate())

	// Failed attempts are logged into the test's output: a retry is the
	// one way a receiver hears an evaluation twice.
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	var checkers []*Checker
	var dispatchers []*Dispatcher
	for range 3 {
		ns, err := cfg.Notifiers(NotifierDeps{EvalInterval: time.Minute})
		require.NoError(t, err)
		d, err := NewDispatcher(DispatcherConfig{
			Logger: logger, Registerer: prometheus.NewRegistry(), Notifiers: ns,
			InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		})
		require.NoError(t, err)
		c, err := NewChecker(CheckerConfig{Logger: discardLogger(), Source: store, States: store, Dispatcher: d, Rules: cfg.RuleSet()})
		require.NoError(t, err)
		checkers = append(checkers, c)
		dispatchers = append(dispatchers, d)
	}
	// received checks that each receiver's notifications were delivered
	// once each, and that any request beyond those is explained by a retry
	// (receivers tolerate the duplicate a retry after a lost answer makes).
	received := func(notifier string, r *receiver, want int) {
		t.Helper()
		var success, retries float64
		for _, d := range dispatchers {
			success += notificationCount(d, notifier, ResultSuccess)
			retries += notificationCount(d, notifier, ResultRetry)
		}
		require.Equal(t, float64(want), success, "%s: deliveries", notifier)
		got := len(r.requests())
		require.GreaterOrEqual(t, got, want, "%s: requests", notifier)
		require.LessOrEqual(t, float64(got), float64(want)+retries, "%s: requests beyond the deliveries and their retries", notifier)
	}

	// An hour, one tick a minute: orders has 3 dead messages from minute 10
	// to minute 40, so depth_nonzero fires at 15 and resolves at 40.
	sent := 0
	for m := 0; m < 60; m++ {
		var q []QueueStats
		if m >= 10 && m < 40 {
			q = []QueueStats{{SourceQueue: "orders", Pending: 3, OldestPending: time.Duration(m-10) * time.Minute}}
		}
		store.set(Snapshot{At: t0.Add(time.Duration(m) * time.Minute), Queues: q})
		n, err := checkers[m%3].Check(t.Context())
		require.NoError(t, err, "minute %d", m)
		sent += n
	}
	require.Equal(t, 2, sent)

	received("webhook", webhook, 2)
	received("slack", slack, 2)
	// Alertmanager hears every evaluation while firing (15..39) plus the resolve.
	received("alertmanager", am, 26)

	var hook []WebhookPayload
	reqs := webhook.requests()
	for i, req := range reqs {
		if i > 0 && bytes.Equal(req.Body, reqs[i-1].Body) {
			continue // a retry's duplicate, allowed above
		}
		var p WebhookPayload
		webhook.body(t, i, &p)
		hook = append(hook, p)
	}
	require.Len(t, hook, 2, "fire and resolve, nothing else, whichever instance ran")
	require.Equal(t, StatusFiring, hook[0].Status)
	require.Equal(t, "depth_nonzero", hook[0].Alerts[0].Rule)
	require.Equal(t, t0.Add(15*time.Minute), hook[0].Alerts[0].StartsAt)
	require.Equal(t, StatusResolved, hook[1].Status)
	require.Equal(t, t0.Add(15*time.Minute), hook[1].Alerts[0].StartsAt)
	require.Equal(t, t0.Add(40*time.Minute), hook[1].Alerts[0].EndsAt)

	var last []AlertmanagerAlert
	am.body(t, len(am.requests())-1, &last)
	require.Equal(t, t0.Add(40*time.Minute), last[0].EndsAt)

	st, err := store.LoadAlertState(t.Context())
	require.NoError(t, err)
	require.Empty(t, st.Alerts)
	require.Equal(t, t0.Add(59*time.Minute), st.EvaluatedAt)
}

func TestCheckerSendsNothingWhenSaveFails(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	wh, err := NewWebhookNotifier(WebhookConfig{URL: rcv.URL})
	require.NoError(t, err)
	d, _ := newTestDispatcher(t, wh)
	fenced := errors.New("lease lost: fencing token 7 is stale")
	store := &memStore{saveErr: fenced}
	store.set(pending(t0, map[string]int64{"orders": 500}))
	c, err := NewChecker(CheckerConfig{Logger: discardLogger(), Source: store, States: store, Dispatcher: d, Rules: DefaultRuleSet()})
	require.NoError(t, err)

	_, err = c.Check(t.Context())
	require.ErrorIs(t, err, fenced)
	require.ErrorContains(t, err, "alerts: save state evaluated at 2026-03-01T12:00:00Z")
	require.Empty(t, rcv.requests(), "an instance that cannot save must not notify")
}

func TestCheckerReportsDeliveryFailureAfterSaving(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusBadRequest)
	wh, err := NewWebhookNotifier(WebhookConfig{URL: rcv.URL})
	require.NoError(t, err)
	d, _ := newTestDispatcher(t, wh)
	store := &memStore{}
	store.set(Snapshot{Queues: []QueueStats{{SourceQueue: "orders", Pending: 500}}}) // no time: the checker's clock is used
	c, err := NewChecker(CheckerConfig{
		Logger: discardLogger(), Source: store, States: store, Dispatcher: d, Rules: DefaultRuleSet(),
		Now: func() time.Time { return t0 },
	})
	require.NoError(t, err)

	n, err := c.Check(t.Context())
	require.Equal(t, 1, n)
	require.ErrorContains(t, err, "status 400")
	require.Equal(t, 1, store.saves)
	st, err := store.LoadAlertState(t.Context())
	require.NoError(t, err)
	require.Equal(t, t0, st.EvaluatedAt)
	require.Equal(t, PhaseFiring, phaseOf(st, "pending_count", "orders"))
}

func TestCheckerConfigValidation(t *testing.T) {
	t.Parallel()
	d, _ := newTestDispatcher(t)
	s := &memStore{}
	base := CheckerConfig{Logger: discardLogger(), Source: s, States: s, Dispatcher: d, Rules: DefaultRuleSet()}
	for _, tt := range []struct {
		edit func(*CheckerConfig)
		want string
	}{
		{func(c *CheckerConfig) { c.Logger = nil }, "alerts: checker config: logger: required"},
		{func(c *CheckerConfig) { c.Source = nil }, "alerts: checker config: source: required"},
		{func(c *CheckerConfig) { c.States = nil }, "alerts: checker config: states: required"},
		{func(c *CheckerConfig) { c.Dispatcher = nil }, "alerts: checker config: dispatcher: required"},
		{func(c *CheckerConfig) { c.Rules.RepeatInterval = -1 }, "alerts: checker config: alerts.repeat_interval: must be >= 0 (0 never repeats), got -1ns"},
	} {
		cfg := base
		tt.edit(&cfg)
		_, err := NewChecker(cfg)
		require.EqualError(t, err, tt.want)
	}
}
