package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// cronGet GETs url and checks the answer against the OpenAPI document.
func cronGet(t *testing.T, url, token string, v any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
	conform(t, openAPIRouter(t, req.URL.Scheme+"://"+req.URL.Host), req, nil, resp, body)
	if v != nil {
		require.NoError(t, json.Unmarshal(body, v), string(body))
	}
	return resp.StatusCode
}

// TestJobsAndAlertsRoutes serves GET /api/v1/jobs and GET /api/v1/alerts
// from a running cron service: jobs with lease, last success and runs;
// alerts with rules, state and since; a token scoped to one queue sees only
// that queue's alerts and overrides. Without the cron service both answer
// 503 in the error envelope.
func TestJobsAndAlertsRoutes(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	authn, err := auth.New(auth.Config{
		AdminToken: tokAdmin,
		Tokens: []auth.Token{
			{Name: "viewer", Token: tokViewer, Role: auth.RoleViewer},
			{Name: "orders-viewer", Token: tokScoped, Role: auth.RoleViewer, Queues: []string{"orders"}},
		},
		RatePerSecond: -1,
	})
	require.NoError(t, err)

	var rules alerts.Config
	rules.Rules = []alerts.Rule{{Name: "pending_count", Kind: alerts.KindPendingCount, Threshold: 0}}
	th := 10.0
	rules.Overrides = alerts.Overrides{"orders": {"pending_count": {Threshold: &th}}, "billing": {"pending_count": {Threshold: &th}}}
	require.NoError(t, rules.Validate())
	svc, err := cron.New(cron.Config{
		Store: st, Logger: log, Registerer: prometheus.NewRegistry(), Instance: "api-test",
		Schedules: cron.Only(cron.Schedules{Summary: "@every 200ms", Alerts: "@every 200ms"}),
		Alerts:    cron.AlertsConfig{Rules: rules.RuleSet()},
	})
	require.NoError(t, err)
	svc.Start()
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })

	for _, q := range []string{"orders", "billing"} {
		b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
		for i := range 12 {
			b.Messages = append(b.Messages, store.NewMessage{
				SourceQueue: q, DeadLetterQueue: "dlq", Reason: "rejected", Properties: []byte(`{}`), Headers: []byte(`{}`),
				Body: []byte("x"), FirstFailedAt: time.Now(), FailedAt: time.Now(), Fingerprint: int64(i),
			})
		}
		_, err := st.IngestBatch(ctx, b)
		require.NoError(t, err)
	}

	newServer := func(c ops.CronViews) string {
		cfg := api.Config{Addr: "127.0.0.1:0", Ops: newOps(t, st, nil, c, 0), Auth: authn, Logger: log}
		s, err := api.New(cfg)
		require.NoError(t, err)
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		return srv.URL
	}
	url := newServer(svc)

	var view cron.AlertsView
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		require.Equal(t, http.StatusOK, cronGet(t, url+"/api/v1/alerts", tokViewer, &view))
		return len(view.Alerts) == 2
	}, "alerts never fired")
	require.NotNil(t, view.EvaluatedAt)
	require.Equal(t, "@every 200ms", view.Schedule)
	require.Len(t, view.Rules, 1)
	require.Len(t, view.Rules[0].Overrides, 2)
	for _, a := range view.Alerts {
		require.Equal(t, alerts.PhaseFiring, a.State)
		require.False(t, a.Since.IsZero())
		require.Equal(t, 12.0, a.Value)
	}

	var scoped cron.AlertsView
	require.Equal(t, http.StatusOK, cronGet(t, url+"/api/v1/alerts", tokScoped, &scoped))
	require.Len(t, scoped.Alerts, 1)
	require.Equal(t, "orders", scoped.Alerts[0].SourceQueue)
	require.Len(t, scoped.Rules[0].Overrides, 1)
	require.Contains(t, scoped.Rules[0].Overrides, "orders")

	var jobs cron.JobsView
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		require.Equal(t, http.StatusOK, cronGet(t, url+"/api/v1/jobs", tokViewer, &jobs))
		return jobs.Jobs[0].LastSuccessAt != nil
	}, "summary job never succeeded")
	require.Equal(t, "api-test", jobs.Instance)
	byName := map[string]cron.JobView{}
	for _, j := range jobs.Jobs {
		byName[j.Name] = j
	}
	require.Len(t, byName, 8)
	summary := byName[cron.JobSummary]
	require.NotNil(t, summary.Lease)
	require.Equal(t, "api-test", summary.Lease.Holder)
	require.Positive(t, summary.Lease.Token)
	require.NotEmpty(t, summary.Runs)
	require.Equal(t, "api-test", summary.Runs[0].Instance)
	require.Equal(t, cron.ScheduleOff, byName[cron.JobCleanup].Schedule)
	require.Nil(t, byName[cron.JobCleanup].Lease)
	require.Empty(t, byName[cron.JobCleanup].Runs)

	require.Equal(t, http.StatusUnauthorized, cronGet(t, url+"/api/v1/jobs", "", nil))
	require.Equal(t, http.StatusUnauthorized, cronGet(t, url+"/api/v1/alerts", tokWrong, nil))

	bare := newServer(nil)
	for _, path := range []string{"/api/v1/jobs", "/api/v1/alerts"} {
		var env struct {
			Error struct{ Code string } `json:"error"`
		}
		require.Equal(t, http.StatusServiceUnavailable, cronGet(t, bare+path, tokAdmin, &env), path)
		require.Equal(t, "unavailable", env.Error.Code, fmt.Sprint(path))
	}
}

// TestAlertsWhenEvaluationStopped: the instance that evaluated alerts
// stops and the one left has the alerts job off. While the saved state is
// current, GET /api/v1/alerts and dlq_alerts_firing on the one left show
// the alert firing; once it is stale (its evaluation backdated rather than
// waited for), the API says stale, with its age, and shows the alert as
// unknown (firing when last evaluated), and the metric reports no alert
// firing and dlq_alerts_stale 1.
func TestAlertsWhenEvaluationStopped(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	authn, err := auth.New(auth.Config{AdminToken: tokAdmin,
		Tokens: []auth.Token{{Name: "viewer", Token: tokViewer, Role: auth.RoleViewer}}, RatePerSecond: -1})
	require.NoError(t, err)
	rules := cron.AlertsConfig{Rules: alerts.RuleSet{Rules: []alerts.Rule{
		{Name: "pending_count", Kind: alerts.KindPendingCount, Threshold: 10, Severity: "warning"}}}}
	evaluator, err := cron.New(cron.Config{
		Store: st, Logger: log, Registerer: prometheus.NewRegistry(), Instance: "evaluator",
		Schedules: cron.Only(cron.Schedules{Alerts: "@every 200ms"}), Alerts: rules,
	})
	require.NoError(t, err)
	evaluator.Start()
	reg := prometheus.NewRegistry()
	left, err := cron.New(cron.Config{
		Store: st, Logger: log, Registerer: reg, Instance: "left", Schedules: cron.Only(cron.Schedules{}), Alerts: rules,
	})
	require.NoError(t, err)
	s, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: newOps(t, st, nil, left, 0), Auth: authn, Logger: log})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	for i := range 12 {
		b.Messages = append(b.Messages, store.NewMessage{
			SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", Properties: []byte(`{}`), Headers: []byte(`{}`),
			Body: []byte("x"), FirstFailedAt: time.Now(), FailedAt: time.Now(), Fingerprint: int64(i),
		})
	}
	_, err = st.IngestBatch(ctx, b)
	require.NoError(t, err)

	gauges := func(reg prometheus.Gatherer, firing, stale int) error {
		return testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP dlq_alerts_firing Alerts currently firing, by rule (one per source queue, policy or approval request, one for global rules).
# TYPE dlq_alerts_firing gauge
dlq_alerts_firing{rule="pending_count"} %d
# HELP dlq_alerts_stale 1 when the saved alert state is stale: no instance has evaluated alerts for several ticks of the alerts job's schedule (job off or not running), so no alert is reported firing.
# TYPE dlq_alerts_stale gauge
dlq_alerts_stale %d
`, firing, stale)), "dlq_alerts_firing", "dlq_alerts_stale")
	}
	var view cron.AlertsView
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		require.Equal(t, http.StatusOK, cronGet(t, srv.URL+"/api/v1/alerts", tokViewer, &view))
		return len(view.Alerts) == 1 && view.Alerts[0].State == alerts.PhaseFiring
	}, "the alert never fired")
	require.False(t, view.Stale)
	require.Equal(t, cron.ScheduleOff, view.Schedule, "off on the instance that answered")
	require.NotNil(t, view.EvaluatedAt)
	require.NotNil(t, view.StaleAfter)
	require.True(t, view.StaleAfter.After(*view.EvaluatedAt))
	require.NotNil(t, view.AgeSeconds)
	require.Empty(t, view.Alerts[0].LastState)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return gauges(reg, 1, 0) == nil }, "the firing alert is not in the metric")

	// The evaluator stops; nobody evaluates any more. Its last state is
	// made ten minutes old.
	require.NoError(t, evaluator.Stop(ctx))
	_, err = db.Exec(ctx, `
UPDATE alert_state SET state = state || jsonb_build_object(
    'evaluated_at', now() - interval '10 minutes', 'stale_after', now() - interval '10 minutes' + interval '1 minute 0.6 seconds')`)
	require.NoError(t, err)

	require.Equal(t, http.StatusOK, cronGet(t, srv.URL+"/api/v1/alerts", tokViewer, &view))
	require.True(t, view.Stale)
	require.NotNil(t, view.AgeSeconds)
	require.GreaterOrEqual(t, *view.AgeSeconds, 600.0)
	require.Less(t, *view.AgeSeconds, 660.0)
	require.Len(t, view.Alerts, 1)
	a := view.Alerts[0]
	require.Equal(t, alerts.PhaseUnknown, a.State, "not known to be firing")
	require.Equal(t, alerts.PhaseFiring, a.LastState)
	require.Equal(t, *view.EvaluatedAt, a.Since, "unknown since the last evaluation")
	require.False(t, a.LastSince.IsZero(), "since when it was firing")

	// An instance started now, with the job off too, reads that state for
	// its metric. (The one left keeps the newer state it had read, and
	// reports it stale once its own stale_after passes: TestFiringGaugeDropsStaleState.)
	reg = prometheus.NewRegistry()
	_, err = cron.New(cron.Config{
		Store: st, Logger: log, Registerer: reg, Instance: "next", Schedules: cron.Only(cron.Schedules{}), Alerts: rules,
	})
	require.NoError(t, err)
	require.NoError(t, gauges(reg, 0, 1), "the stale alert is reported firing")
}
