package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/config"
)

// TestCronCleanupAlertsSections covers the three sections of the cron
// feature: defaults, YAML (with the alerts package's format inline), the
// environment, and errors that name the setting.
func TestCronCleanupAlertsSections(t *testing.T) {
	c, err := config.Load(config.Flags{}, env(nil))
	require.NoError(t, err)
	require.Equal(t, "@every 1m", c.Cron.Summary)
	require.Equal(t, "@every 10m", c.Cron.Cleanup)
	require.Equal(t, 30*24*time.Hour, c.Cleanup.Retention["replayed"].D())
	require.Equal(t, 30*24*time.Hour, c.Cleanup.Retention["acknowledged"].D())
	require.Equal(t, 1000, c.Cleanup.BatchSize)
	require.Equal(t, 10*time.Millisecond, c.Cleanup.Pause.D())
	require.Equal(t, 24*time.Hour, c.Cleanup.ControlCommandTTL.D())
	require.Zero(t, c.Cleanup.MaxMessages)
	require.Empty(t, c.Alerts.Webhooks)

	file := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
cron:
  cleanup: "0 3 * * *"
  alerts: off
  lease_ttl: 10s
cleanup:
  retention:
    acknowledged: 0s
  max_messages: 5000000
  allow_evict_pending: true
  pause: 20ms
alerts:
  repeat_interval: 1h
  overrides:
    orders:
      pending_count: {threshold: 1000}
  slack:
    - url: http://slack.example/hook
`), 0o600))
	c, err = config.Load(config.Flags{ConfigFile: file}, env(map[string]string{
		"DLQ_CRON_SUMMARY":            "@every 30s",
		"DLQ_RETENTION_REPLAYED":      "48h",
		"DLQ_MAX_BYTES":               "1073741824",
		"DLQ_ALERT_WEBHOOK_URL":       "http://hooks.example/dlq",
		"DLQ_ALERTMANAGER_URL":        "http://alertmanager:9093",
		"DLQ_CRON_DISABLED":           "true",
		"DLQ_CRON_RECONCILE_INTERVAL": "6h",
	}))
	require.NoError(t, err)
	require.Equal(t, "@every 30s", c.Cron.Summary)
	require.Equal(t, "0 3 * * *", c.Cron.Cleanup)
	require.Equal(t, "off", c.Cron.Alerts)
	require.True(t, c.Cron.Disabled)
	require.Equal(t, 6*time.Hour, c.Cron.ReconcileInterval.D())
	require.Equal(t, 10*time.Second, c.Cron.LeaseTTL.D())
	require.Equal(t, 48*time.Hour, c.Cleanup.Retention["replayed"].D())
	require.Zero(t, c.Cleanup.Retention["acknowledged"])
	require.Equal(t, int64(5000000), c.Cleanup.MaxMessages)
	require.Equal(t, int64(1<<30), c.Cleanup.MaxBytes)
	require.True(t, c.Cleanup.AllowEvictPending)
	require.Equal(t, 20*time.Millisecond, c.Cleanup.Pause.D())
	require.Equal(t, time.Hour, *c.Alerts.RepeatInterval)
	require.Equal(t, 1000.0, *c.Alerts.Overrides["orders"]["pending_count"].Threshold)
	require.Len(t, c.Alerts.Slack, 1)
	require.Len(t, c.Alerts.Webhooks, 1)
	require.Equal(t, "http://hooks.example/dlq", c.Alerts.Webhooks[0].URL)
	require.Len(t, c.Alerts.Alertmanagers, 1)

	for name, tc := range map[string]struct {
		env  map[string]string
		yaml string
		want string
	}{
		"bad schedule":        {env: map[string]string{"DLQ_CRON_CLEANUP": "every day"}, want: "cron.cleanup / DLQ_CRON_CLEANUP"},
		"zone only":           {env: map[string]string{"DLQ_CRON_SUMMARY": "TZ=UTC"}, want: "cron.summary / DLQ_CRON_SUMMARY"},
		"tiny every":          {env: map[string]string{"DLQ_CRON_ALERTS": "@every 1ms"}, want: "cron.alerts / DLQ_CRON_ALERTS"},
		"negative lease":      {env: map[string]string{"DLQ_CRON_LEASE_TTL": "-1s"}, want: "cron.lease_ttl"},
		"pending retention":   {yaml: "cleanup:\n  retention:\n    pending: 24h\n", want: "cleanup.retention.pending"},
		"negative retention":  {env: map[string]string{"DLQ_RETENTION_REPLAYED": "-1h"}, want: "cleanup.retention.replayed"},
		"batch size":          {env: map[string]string{"DLQ_CLEANUP_BATCH_SIZE": "0"}, want: "cleanup.batch_size / DLQ_CLEANUP_BATCH_SIZE"},
		"max messages":        {env: map[string]string{"DLQ_MAX_MESSAGES": "-5"}, want: "cleanup.max_messages / DLQ_MAX_MESSAGES"},
		"max bytes not int":   {env: map[string]string{"DLQ_MAX_BYTES": "1GB"}, want: "DLQ_MAX_BYTES"},
		"evict pending":       {env: map[string]string{"DLQ_ALLOW_EVICT_PENDING": "maybe"}, want: "DLQ_ALLOW_EVICT_PENDING"},
		"webhook url":         {env: map[string]string{"DLQ_ALERT_WEBHOOK_URL": "not a url"}, want: "alerts.webhooks[0].url"},
		"rule for":            {yaml: "alerts:\n  rules:\n    - {name: x, kind: pending_count, threshold: 1, for: -1m}\n", want: "alerts.rules[0].for"},
		"override of no rule": {yaml: "alerts:\n  overrides:\n    orders:\n      nope: {threshold: 1}\n", want: "alerts.overrides.orders.nope"},
	} {
		t.Run(name, func(t *testing.T) {
			flags := config.Flags{}
			if tc.yaml != "" {
				flags.ConfigFile = filepath.Join(t.TempDir(), "dlq.yaml")
				require.NoError(t, os.WriteFile(flags.ConfigFile, []byte(tc.yaml), 0o600))
			}
			_, err := config.Load(flags, env(tc.env))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
