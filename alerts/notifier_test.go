package alerts

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWebhookNotifierPayload(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	n, err := NewWebhookNotifier(WebhookConfig{URL: rcv.URL + "/hooks/dlq", Headers: map[string]string{"Authorization": "Bearer s3cret"}})
	require.NoError(t, err)
	require.Equal(t, "webhook", n.Name())
	firing, resolved := sampleAlerts(t)

	retryable, err := n.Notify(t.Context(), firing, resolved)
	require.NoError(t, err)
	require.False(t, retryable)

	reqs := rcv.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, http.MethodPost, reqs[0].Method)
	require.Equal(t, "/hooks/dlq", reqs[0].Path)
	require.Equal(t, "application/json", reqs[0].Header.Get("Content-Type"))
	require.Equal(t, "Bearer s3cret", reqs[0].Header.Get("Authorization"))

	var got struct {
		Version string           `json:"version"`
		Status  string           `json:"status"`
		Alerts  []map[string]any `json:"alerts"`
	}
	rcv.body(t, 0, &got)
	require.Equal(t, "1", got.Version)
	require.Equal(t, "firing", got.Status, "a batch with any firing alert is firing")
	require.Len(t, got.Alerts, 2)

	f := got.Alerts[0]
	require.Equal(t, "pending_count", f["rule"])
	require.Equal(t, "pending_count", f["kind"])
	require.Equal(t, "orders", f["source_queue"])
	require.Equal(t, "firing", f["status"])
	require.Equal(t, "warning", f["severity"])
	require.Equal(t, 150.0, f["value"])
	require.Equal(t, 100.0, f["threshold"])
	require.Equal(t, "2026-03-01T12:01:00Z", f["starts_at"])
	require.NotContains(t, f, "ends_at", "firing alerts have no end")
	require.Equal(t, map[string]any{"alertname": "pending_count", "service": "dlq", "severity": "warning", "source_queue": "orders"}, f["labels"])
	ann := f["annotations"].(map[string]any)
	require.Equal(t, `150 dead messages pending from "orders"`, ann["summary"])
	require.NotEmpty(t, ann["description"])

	r := got.Alerts[1]
	require.Equal(t, "resolved", r["status"])
	require.Equal(t, "billing", r["source_queue"])
	require.Equal(t, "2026-03-01T12:00:00Z", r["starts_at"])
	require.Equal(t, "2026-03-01T12:01:00Z", r["ends_at"])

	_, err = n.Notify(t.Context(), resolved)
	require.NoError(t, err)
	rcv.body(t, 1, &got)
	require.Equal(t, "resolved", got.Status, "a batch of only resolved alerts is resolved")
}

func TestSlackNotifierPayload(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	n, err := NewSlackNotifier(SlackConfig{URL: rcv.URL + "/services/T000/B000/XXXX", Channel: "#oncall", Username: "dlq"})
	require.NoError(t, err)
	require.Equal(t, "slack", n.Name())
	firing, resolved := sampleAlerts(t)
	critical := firing
	critical.Severity = SeverityCritical

	_, err = n.Notify(t.Context(), firing, resolved, critical)
	require.NoError(t, err)
	require.Equal(t, "/services/T000/B000/XXXX", rcv.requests()[0].Path)

	var msg SlackMessage
	rcv.body(t, 0, &msg)
	require.Equal(t, "#oncall", msg.Channel)
	require.Equal(t, "dlq", msg.Username)
	require.Contains(t, msg.Text, "2 firing")
	require.Contains(t, msg.Text, "1 resolved")
	require.Len(t, msg.Attachments, 3)

	a := msg.Attachments[0]
	require.Equal(t, SlackColorWarning, a.Color)
	require.Equal(t, `[FIRING] 150 dead messages pending from "orders"`, a.Title)
	require.Equal(t, a.Title, a.Fallback)
	require.Equal(t, firing.Annotations[AnnotationDescription], a.Text)
	require.Equal(t, t0.Add(time.Minute).Unix(), a.Ts)
	require.Contains(t, a.Fields, SlackField{Title: "Source queue", Value: "orders", Short: true})
	require.Contains(t, a.Fields, SlackField{Title: "Threshold", Value: "100", Short: true})

	require.Equal(t, SlackColorResolved, msg.Attachments[1].Color)
	require.True(t, strings.HasPrefix(msg.Attachments[1].Title, "[RESOLVED]"))
	require.Equal(t, t0.Add(time.Minute).Unix(), msg.Attachments[1].Ts, "resolved attachments are stamped with the end")
	require.Equal(t, SlackColorFiring, msg.Attachments[2].Color)

	_, err = n.Notify(t.Context(), resolved)
	require.NoError(t, err)
	rcv.body(t, 1, &msg)
	require.Equal(t, `[RESOLVED] Dead-letter depth back to normal for source queue "billing"`, msg.Text)
}

func TestAlertmanagerNotifierPayload(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	now := t0.Add(90 * time.Second)
	n, err := NewAlertmanagerNotifier(AlertmanagerConfig{
		URL: rcv.URL + "/", GeneratorURL: "http://dlq.example:8080/api/v1/alerts",
		EvalInterval: 30 * time.Second, Now: func() time.Time { return now },
	})
	require.NoError(t, err)
	require.True(t, n.RefreshFiring())
	firing, resolved := sampleAlerts(t)

	_, err = n.Notify(t.Context(), firing, resolved)
	require.NoError(t, err)
	reqs := rcv.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "/api/v2/alerts", reqs[0].Path)

	var got []map[string]any
	rcv.body(t, 0, &got)
	require.Len(t, got, 2)
	require.Equal(t, map[string]any{
		"labels": map[string]any{"alertname": "pending_count", "source_queue": "orders", "severity": "warning", "service": "dlq"},
		"annotations": map[string]any{
			"summary":     firing.Annotations[AnnotationSummary],
			"description": firing.Annotations[AnnotationDescription],
		},
		"startsAt":     "2026-03-01T12:01:00Z",
		"endsAt":       "2026-03-01T12:03:30Z", // now + 4 × 30s: refreshed every evaluation
		"generatorURL": "http://dlq.example:8080/api/v1/alerts",
	}, got[0])
	require.Equal(t, "depth_nonzero", got[1]["labels"].(map[string]any)["alertname"])
	require.Equal(t, "2026-03-01T12:00:00Z", got[1]["startsAt"])
	require.Equal(t, "2026-03-01T12:01:00Z", got[1]["endsAt"], "resolved alerts end at the resolve time")
}

func TestHTTPNotifiersRetryClassification(t *testing.T) {
	t.Parallel()
	makers := map[string]func(url string) (Notifier, error){
		"webhook":      func(u string) (Notifier, error) { return NewWebhookNotifier(WebhookConfig{URL: u}) },
		"slack":        func(u string) (Notifier, error) { return NewSlackNotifier(SlackConfig{URL: u}) },
		"alertmanager": func(u string) (Notifier, error) { return NewAlertmanagerNotifier(AlertmanagerConfig{URL: u}) },
	}
	cases := []struct {
		status    int
		retryable bool
	}{
		{http.StatusInternalServerError, true},
		{http.StatusBadGateway, true},
		{http.StatusServiceUnavailable, true},
		{http.StatusTooManyRequests, true},
		{http.StatusBadRequest, false},
		{http.StatusUnauthorized, false},
		{http.StatusNotFound, false},
	}
	firing, _ := sampleAlerts(t)
	for kind, mk := range makers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				rcv := newReceiver(t, c.status)
				n, err := mk(rcv.URL + "/secret-token-path")
				require.NoError(t, err)
				retryable, err := n.Notify(t.Context(), firing)
				require.Error(t, err, "status %d", c.status)
				require.Equal(t, c.retryable, retryable, "status %d", c.status)
				require.Contains(t, err.Error(), fmt.Sprintf("status %d", c.status))
				require.NotContains(t, err.Error(), "secret-token-path", "URLs carry secrets and stay out of errors")
			}

			// A receiver that is down is a network error: retryable.
			rcv := newReceiver(t)
			n, err := mk(rcv.URL + "/secret-token-path")
			require.NoError(t, err)
			rcv.Close()
			retryable, err := n.Notify(t.Context(), firing)
			require.Error(t, err)
			require.True(t, retryable)
			require.NotContains(t, err.Error(), "secret-token-path")
		})
	}
}

func TestHTTPNotifierHonoursContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(rcv.Close)
	t.Cleanup(func() { close(release) }) // runs first, so Close does not wait on the handler
	n, err := NewWebhookNotifier(WebhookConfig{URL: rcv.URL})
	require.NoError(t, err)
	firing, _ := sampleAlerts(t)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	retryable, err := n.Notify(ctx, firing)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, retryable, "a caller that gave up does not want retries")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestLogNotifier(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	n, err := NewLogNotifier(slog.New(slog.NewJSONHandler(&buf, nil)))
	require.NoError(t, err)
	firing, resolved := sampleAlerts(t)
	retryable, err := n.Notify(t.Context(), firing, resolved)
	require.NoError(t, err)
	require.False(t, retryable)
	out := buf.String()
	require.Contains(t, out, `"level":"WARN","msg":"alert firing: 150 dead messages pending from \"orders\""`)
	require.Contains(t, out, `"rule":"pending_count"`)
	require.Contains(t, out, `"source_queue":"orders"`)
	require.Contains(t, out, `"level":"INFO","msg":"alert resolved:`)
	require.Contains(t, out, `"ends_at":"2026-03-01T12:01:00Z"`)
}

func TestNotifierConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := NewWebhookNotifier(WebhookConfig{})
	require.EqualError(t, err, "alerts: webhook notifier: url: required")
	_, err = NewSlackNotifier(SlackConfig{URL: "ftp://x/y"})
	require.EqualError(t, err, `alerts: slack notifier: url: must be an absolute http:// or https:// URL, got "ftp://x"`)
	_, err = NewAlertmanagerNotifier(AlertmanagerConfig{URL: "http://am:9093", EvalInterval: -time.Second})
	require.EqualError(t, err, "alerts: alertmanager notifier: eval_interval: must be >= 0, got -1s")
	_, err = NewLogNotifier(nil)
	require.EqualError(t, err, "alerts: log notifier: logger: required")
}
