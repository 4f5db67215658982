package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
