package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// receiver is a real HTTP server playing a webhook, Slack or Alertmanager.
// It answers with statuses in turn (the last repeats) and keeps every
// request, with the status it was given.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	reqs     []receivedRequest
}

type receivedRequest struct {
	Path   string
	Body   []byte
	Status int
}

func newReceiver(t testing.TB, statuses ...int) *receiver {
	t.Helper()
	if len(statuses) == 0 {
		statuses = []int{http.StatusOK}
	}
	r := &receiver{statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		status := r.statuses[min(len(r.reqs), len(r.statuses)-1)]
		r.reqs = append(r.reqs, receivedRequest{Path: req.URL.Path, Body: body, Status: status})
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

// delivered returns the bodies of the requests answered with 2xx.
func (r *receiver) delivered() []receivedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedRequest
	for _, q := range r.reqs {
		if q.Status < 300 {
			out = append(out, q)
		}
	}
	return out
}

func (r *receiver) all() []receivedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedRequest(nil), r.reqs...)
}

// webhookAlerts decodes every delivered generic-webhook payload.
func (r *receiver) webhookAlerts(t testing.TB) []alerts.Alert {
	t.Helper()
	var out []alerts.Alert
	for _, q := range r.delivered() {
		var p alerts.WebhookPayload
		require.NoError(t, json.Unmarshal(q.Body, &p), string(q.Body))
		require.Equal(t, alerts.WebhookPayloadVersion, p.Version)
		out = append(out, p.Alerts...)
	}
	return out
}

// waitAlert waits for a delivered webhook notification of rule with status.
func (r *receiver) waitAlert(t testing.TB, rule, status string) alerts.Alert {
	t.Helper()
	var found alerts.Alert
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		for _, a := range r.webhookAlerts(t) {
			if a.Rule == rule && string(a.Status) == status {
				found = a
				return true
			}
		}
		return false
	}, "no %s notification for rule %s", status, rule)
	return found
}

// notes counts delivered webhook notifications by "rule/queue/status".
func (r *receiver) notes(t testing.TB) map[string]int {
	out := map[string]int{}
	for _, a := range r.webhookAlerts(t) {
		out[a.Rule+"/"+a.SourceQueue+"/"+string(a.Status)]++
	}
	return out
}

func alertsConfig(t testing.TB, doc string) alerts.Config {
	t.Helper()
	var c alerts.Config
	require.NoError(t, yaml.Unmarshal([]byte(doc), &c))
	require.NoError(t, c.Validate())
	return c
}

func alertsRules(t testing.TB, doc string) alerts.RuleSet {
	return alertsConfig(t, doc).RuleSet()
}

func webhookNotifiers(t testing.TB, url string) []alerts.Notifier {
	t.Helper()
	ns, err := alerts.Config{Webhooks: []alerts.WebhookConfig{{URL: url}}}.Notifiers(alerts.NotifierDeps{})
	require.NoError(t, err)
	return ns
}

// TestAlertsFireHoldResolve runs the alert job on three instances against
// a real webhook (which fails its first delivery with a 500), a Slack-shaped
// and an Alertmanager-shaped receiver. Each transition is delivered exactly
// once to the webhook and Slack whichever instance evaluated it, the 500 is
// retried, the alerts hold without repeats, and they resolve.
func TestAlertsFireHoldResolve(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	hook := newReceiver(t, http.StatusInternalServerError, http.StatusOK)
	slack := newReceiver(t)
	am := newReceiver(t)

	cfg := alertsConfig(t, fmt.Sprintf(`
repeat_interval: 0s
rules:
  - {name: pending_count, kind: pending_count, threshold: 3}
  - {name: depth_nonzero, kind: depth_nonzero, threshold: 0, for: 1s}
  - {name: repeat_failures, kind: repeat_failures, threshold: 0, severity: critical}
overrides:
  quiet:
    pending_count: {disabled: true}
webhooks: [{url: %q}]
slack: [{url: %q}]
alertmanagers: [{url: %q, generator_url: "http://dlq.test/api/v1/alerts"}]
`, hook.URL, slack.URL, am.URL))
	var svcs []*Service
	var regs []*prometheus.Registry
	for i := range 3 {
		ns, err := cfg.Notifiers(alerts.NotifierDeps{EvalInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		svc, err := New(Config{
			Store: st, Logger: testLogger(t), Registerer: reg, Instance: fmt.Sprintf("inst-%d", i),
			LeaseTTL:  300 * time.Millisecond, // short, so the job moves between instances
			Schedules: Only(Schedules{Alerts: "@every 200ms"}),
			Alerts:    AlertsConfig{Rules: cfg.RuleSet(), Notifiers: ns, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = svc.Stop(context.Background()) })
		svcs = append(svcs, svc)
		regs = append(regs, reg)
	}

	// Trouble: five pending in orders, one of them failing over and over;
	// two pending in quiet, whose pending_count rule is off. Set up before
	// the jobs start: an evaluation while one message is out for replay
	// would see four pending.
	ids := ingest(t, st, db, "orders", 5, 10)
	for range 3 {
		replayIDs(t, st, ids[:1], store.OutcomePublished, false)
		returnIDs(t, st, db, ids[:1])
	}
	quiet := ingest(t, st, db, "quiet", 4, 10)
	for _, svc := range svcs {
		svc.Start()
	}

	fired := hook.waitAlert(t, "pending_count", "firing")
	require.Equal(t, "orders", fired.SourceQueue)
	require.Equal(t, 5.0, fired.Value)
	require.Equal(t, 3.0, fired.Threshold)
	require.Equal(t, map[string]string{"alertname": "pending_count", "service": "dlq", "severity": "warning", "source_queue": "orders"}, fired.Labels)
	require.NotEmpty(t, fired.Annotations["summary"])
	require.False(t, fired.StartsAt.IsZero())
	rep := hook.waitAlert(t, "repeat_failures", "firing")
	require.Equal(t, 1.0, rep.Value)
	require.Equal(t, "critical", rep.Severity)
	hook.waitAlert(t, "depth_nonzero", "firing") // after its 1s hold
	require.Equal(t, http.StatusInternalServerError, hook.all()[0].Status, "the first delivery failed")

	// Hold: many more evaluations, on any instance, and nothing new.
	runs := countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'alerts'`)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'alerts' AND outcome = 'success'`) >= runs+8
	}, "alert job stopped running")
	require.Equal(t, map[string]int{
		"pending_count/orders/firing": 1, "repeat_failures/orders/firing": 1,
		"depth_nonzero/orders/firing": 1, "depth_nonzero/quiet/firing": 1,
	}, hook.notes(t))
	require.Len(t, slack.delivered(), len(hook.delivered()), "Slack hears each transition exactly when the webhook does")
	instances := countWhere(t, db, `SELECT count(DISTINCT instance) FROM job_runs WHERE job = 'alerts'`)
	t.Logf("alert evaluations ran on %d instances", instances)

	view, err := svcs[0].Alerts(ctx)
	require.NoError(t, err)
	require.NotNil(t, view.EvaluatedAt)
	require.Len(t, view.Rules, 3)
	states := map[string]alerts.AlertView{}
	for _, a := range view.Alerts {
		states[a.Rule+"/"+a.SourceQueue] = a
	}
	require.Equal(t, alerts.PhaseFiring, states["pending_count/orders"].State)
	require.False(t, states["pending_count/orders"].Since.IsZero())
	var firing float64
	for _, reg := range regs {
		firing = max(firing, metricValue(t, reg, "dlq_alerts_firing", map[string]string{"rule": "pending_count"}))
	}
	require.Equal(t, 1.0, firing)

	// Slack payload: one attachment per alert, coloured, with the queue.
	var sm alerts.SlackMessage
	require.NoError(t, json.Unmarshal(slack.delivered()[0].Body, &sm))
	require.NotEmpty(t, sm.Text)
	require.NotEmpty(t, sm.Attachments)
	require.Contains(t, sm.Attachments[0].Title, "[FIRING]")
	require.Contains(t, fmt.Sprint(sm.Attachments[0].Fields), "orders")

	// Alertmanager: refreshed on every evaluation, endsAt ahead while firing.
	ams := am.delivered()
	require.Greater(t, len(ams), 3)
	var batch []alerts.AlertmanagerAlert
	require.NoError(t, json.Unmarshal(ams[len(ams)-1].Body, &batch))
	require.Equal(t, "/api/v2/alerts", ams[0].Path)
	require.NotEmpty(t, batch)
	for _, a := range batch {
		require.NotEmpty(t, a.Labels["alertname"])
		require.True(t, a.EndsAt.After(time.Now()), "a firing alert's endsAt is in the future")
		require.Equal(t, "http://dlq.test/api/v1/alerts", a.GeneratorURL)
	}

	// Recovery: everything acknowledged; each alert resolves exactly once.
	ackIDs(t, st, append(ids, quiet...))
	hook.waitAlert(t, "pending_count", "resolved")
	hook.waitAlert(t, "repeat_failures", "resolved")
	dlqtest.Eventually(t, 30*time.Second, func() bool { return hook.notes(t)["depth_nonzero/quiet/resolved"] == 1 },
		"depth_nonzero for quiet did not resolve")
	runs = countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'alerts'`)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'alerts' AND outcome = 'success'`) >= runs+5
	}, "alert job stopped running")
	for k, n := range hook.notes(t) {
		require.Equal(t, 1, n, "%s delivered %d times", k, n)
	}
	require.Len(t, hook.notes(t), 8)
	resolved := hook.waitAlert(t, "pending_count", "resolved")
	require.Equal(t, fired.StartsAt, resolved.StartsAt, "one incident, one startsAt")
	require.False(t, resolved.EndsAt.IsZero())

	var last []alerts.AlertmanagerAlert
	found := false
	for _, q := range am.delivered() {
		require.NoError(t, json.Unmarshal(q.Body, &last))
		for _, a := range last {
			if a.Labels["alertname"] == "pending_count" && !a.EndsAt.After(time.Now()) {
				found = true
			}
		}
	}
	require.True(t, found, "Alertmanager got the resolve (endsAt in the past)")
	var sr alerts.SlackMessage
	sl := slack.delivered()
	require.NoError(t, json.Unmarshal(sl[len(sl)-1].Body, &sr))
	require.True(t, strings.Contains(sr.Text, "RESOLVED") || strings.Contains(sr.Text, "resolved"), sr.Text)
	require.Equal(t, alerts.SlackColorResolved, sr.Attachments[0].Color)
}

// TestApprovalNotifications: receivers hear of every new request for
// approval once, when it is made, and once more when it is decided or
// expires, through the alert job; the notification names the request.
func TestApprovalNotifications(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	hook := newReceiver(t)
	cfg := alertsConfig(t, fmt.Sprintf(`
repeat_interval: 0s
rules:
  - {name: approval_pending, kind: approval_pending, threshold: 0}
webhooks: [{url: %q}]
`, hook.URL))
	ns, err := cfg.Notifiers(alerts.NotifierDeps{EvalInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	svc, err := New(Config{
		Store: st, Logger: testLogger(t), Registerer: prometheus.NewRegistry(), Instance: "approvals",
		Schedules: Only(Schedules{Alerts: "@every 100ms"}),
		Alerts:    AlertsConfig{Rules: cfg.RuleSet(), Notifiers: ns},
	})
	require.NoError(t, err)
	svc.Start()
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })

	ingest(t, st, db, "orders", 30, 10)
	request := func(ttl time.Duration) store.Approval {
		a, err := st.CreateApproval(ctx, store.NewApproval{Action: store.ActionDelete, Request: []byte(`{"filter":{"source_queue":"orders"}}`),
			Selection: store.Filter{SourceQueue: "orders"}, TTL: ttl, Actor: store.Actor{Name: "jane", Role: "admin", Via: "api"}})
		require.NoError(t, err)
		return a
	}
	first := request(time.Hour)
	fired := hook.waitAlert(t, "approval_pending", "firing")
	require.Equal(t, strconv.FormatInt(first.ID, 10), fired.Subject)
	require.Equal(t, strconv.FormatInt(first.ID, 10), fired.Labels[alerts.LabelApprovalID])
	require.Equal(t, 30.0, fired.Value)
	require.Contains(t, fired.Annotations[alerts.AnnotationDescription], "delete of 30 messages requested by jane")

	// A second request while the first waits: notified on its own. It
	// expires; the first is rejected: each resolves once.
	second := request(1500 * time.Millisecond)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return hook.notesBySubject(t)["approval_pending/"+strconv.FormatInt(second.ID, 10)+"/firing"] == 1
	}, "no notification of the second request: %v", hook.notesBySubject(t))
	_, err = st.RejectApproval(ctx, first.ID, store.Actor{Name: "joe", Role: "admin", Via: "api"}, "wrong filter")
	require.NoError(t, err)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		n := hook.notesBySubject(t)
		return n["approval_pending/"+strconv.FormatInt(first.ID, 10)+"/resolved"] == 1 &&
			n["approval_pending/"+strconv.FormatInt(second.ID, 10)+"/resolved"] == 1
	}, "the requests did not resolve: %v", hook.notesBySubject(t))
	for k, n := range hook.notesBySubject(t) {
		require.Equal(t, 1, n, "%s notified %d times", k, n)
	}
}

// notesBySubject counts delivered webhook notifications by
// "rule/subject/status".
func (r *receiver) notesBySubject(t testing.TB) map[string]int {
	out := map[string]int{}
	for _, a := range r.webhookAlerts(t) {
		out[a.Rule+"/"+a.Subject+"/"+string(a.Status)]++
	}
	return out
}

// TestAlertsFiringOnEveryInstance: dlq_alerts_firing reports the saved
// alert state on every instance, not what each last evaluated itself. A
// evaluates the alert firing, then stops running the job; B evaluates it
// resolved; A's gauge, and that of C, which runs no job at all, follow.
func TestAlertsFiringOnEveryInstance(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	rules := alertsRules(t, `rules: [{name: pending_count, kind: pending_count, threshold: 3}]`)
	instance := func(name string, disabled bool) (*Service, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		svc, err := New(Config{
			Store: st, Logger: testLogger(t), Registerer: reg, Instance: name, Disabled: disabled,
			LeaseTTL: 300 * time.Millisecond, Schedules: Only(Schedules{Alerts: "@every 200ms"}),
			Alerts: AlertsConfig{Rules: rules},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = svc.Stop(context.Background()) })
		return svc, reg
	}
	firing := func(reg *prometheus.Registry) float64 {
		return metricValue(t, reg, "dlq_alerts_firing", map[string]string{"rule": "pending_count"})
	}
	a, regA := instance("A", false)
	_, regC := instance("C", true)
	ids := ingest(t, st, db, "orders", 5, 10)
	a.Start()
	dlqtest.Eventually(t, 30*time.Second, func() bool { return firing(regA) == 1 }, "A never saw the alert fire")
	dlqtest.Eventually(t, 10*time.Second, func() bool { return firing(regC) == 1 }, "C, which runs no job, does not report the firing alert")
	require.NoError(t, a.Stop(ctx))

	b, regB := instance("B", false)
	b.Start()
	ackIDs(t, st, ids)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		state, _, err := loadAlertState(ctx, st, nil)
		require.NoError(t, err)
		return state.FiringCount()["pending_count"] == 0
	}, "B never resolved the alert")
	require.Equal(t, "B", leaseOf(t, st, JobAlerts).Holder)
	require.Zero(t, firing(regB))
	// A tick or two (the gauge reads the saved state at most once a second).
	dlqtest.Eventually(t, 5*time.Second, func() bool { return firing(regA) == 0 }, "A still reports the resolved alert as firing")
	dlqtest.Eventually(t, 5*time.Second, func() bool { return firing(regC) == 0 }, "C still reports the resolved alert as firing")
}
