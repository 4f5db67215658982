package alerts

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// parse decodes YAML as the configuration loader does: strictly, under an
// alerts key.
func parse(t *testing.T, doc string) Config {
	t.Helper()
	var wrapper struct {
		Alerts Config `yaml:"alerts"`
	}
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&wrapper))
	return wrapper.Alerts
}

func TestConfigZeroMeansDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	require.NoError(t, c.Validate())
	require.Equal(t, DefaultRuleSet(), c.RuleSet())
	ns, err := c.Notifiers(NotifierDeps{})
	require.NoError(t, err)
	require.Empty(t, ns)
}

func TestDefaultRules(t *testing.T) {
	t.Parallel()
	byName := map[string]Rule{}
	for _, r := range DefaultRules() {
		byName[r.Name] = r
	}
	require.Equal(t, Rule{Name: "pending_count", Kind: KindPendingCount, Threshold: 100, Severity: "warning"}, byName["pending_count"])
	require.Equal(t, 86400.0, byName["oldest_pending_age"].Threshold)
	require.Equal(t, 5*time.Minute, byName["depth_nonzero"].For)
	require.Equal(t, 0.0, byName["depth_nonzero"].Threshold)
	require.Equal(t, 0.0, byName["repeat_failures"].Threshold)
	require.Equal(t, 1000.0, byName["ingest_spike"].Threshold)
	require.Equal(t, 90.0, byName["capacity"].Threshold)
	require.Len(t, byName, len(Kinds()), "one default rule per kind")
	require.NoError(t, DefaultRuleSet().Validate())
}

func TestConfigFromYAML(t *testing.T) {
	t.Parallel()
	c := parse(t, `
alerts:
  repeat_interval: 0s
  rules:
    - name: backlog
      kind: pending_count
      threshold: 250
      for: 2m
      labels: {team: payments}
    - name: stale
      kind: oldest_pending_age
      threshold: 3600
      severity: critical
  overrides:
    orders:
      backlog: {threshold: 5000, for: 10m}
      stale: {disabled: true}
  webhooks:
    - url: https://hooks.example.internal/dlq
      headers: {Authorization: "Bearer abc"}
      timeout: 3s
    - url: https://other.example.internal/dlq
  slack:
    - url: https://hooks.slack.com/services/T/B/X
      channel: "#dlq"
  alertmanagers:
    - name: am_main
      url: http://alertmanager:9093
      generator_url: http://dlq:8080/api/v1/alerts
      eval_interval: 30s
`)
	require.NoError(t, c.Validate())
	rs := c.RuleSet()
	require.Zero(t, rs.RepeatInterval, "an explicit 0 turns repeats off")
	require.Equal(t, []Rule{
		{Name: "backlog", Kind: KindPendingCount, Threshold: 250, For: 2 * time.Minute, Severity: "warning", Labels: map[string]string{"team": "payments"}},
		{Name: "stale", Kind: KindOldestPendingAge, Threshold: 3600, Severity: "critical"},
	}, rs.Rules)
	e := rs.effective(rs.Rules[0], "orders")
	require.Equal(t, 5000.0, e.Threshold)
	require.Equal(t, 10*time.Minute, e.For)
	require.True(t, rs.effective(rs.Rules[1], "orders").Disabled)
	require.False(t, rs.effective(rs.Rules[1], "billing").Disabled)

	ns, err := c.Notifiers(NotifierDeps{EvalInterval: time.Minute})
	require.NoError(t, err)
	var names []string
	for _, n := range ns {
		names = append(names, n.Name())
	}
	require.Equal(t, []string{"webhook", "webhook_2", "slack", "am_main"}, names)
	require.Equal(t, 30*time.Second, ns[3].(*AlertmanagerNotifier).cfg.EvalInterval, "the receiver's own setting wins")
	require.Equal(t, 3*time.Second, ns[0].(*WebhookNotifier).client.Timeout)

	view := rs.View()
	require.Equal(t, RuleOverrideView{Threshold: 5000, ForSeconds: 600}, view[0].Overrides["orders"])
	require.Equal(t, 120.0, view[0].ForSeconds)
}

func TestConfigRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	var wrapper struct {
		Alerts Config `yaml:"alerts"`
	}
	dec := yaml.NewDecoder(strings.NewReader("alerts:\n  webhooks:\n    - url: http://x\n      client: {}\n"))
	dec.KnownFields(true)
	require.ErrorContains(t, dec.Decode(&wrapper), "field client not found")
}

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"negative for", `
rules:
  - {name: a, kind: pending_count, threshold: 1}
  - {name: b, kind: pending_count, threshold: 1}
  - {name: c, kind: pending_count, threshold: 1, for: -1m}`,
			[]string{"alerts.rules[2].for: must be >= 0, got -1m0s"}},
		{"rule basics", `
rules:
  - {kind: pending_count}
  - {name: x, kind: queue_size, threshold: -1}
  - {name: x, kind: capacity, threshold: 100, labels: {alertname: y}}`,
			[]string{
				"alerts.rules[0].name: required",
				`alerts.rules[1].kind: "queue_size" is not one of`,
				"alerts.rules[1].threshold: must be >= 0, got -1",
				`alerts.rules[2].name: "x" is used by an earlier rule`,
				"alerts.rules[2].threshold: is a percentage and must be below 100, got 100",
				"alerts.rules[2].labels.alertname: is set by dlq and cannot be configured",
			}},
		{"overrides", `
overrides:
  orders:
    pending_cont: {threshold: 5}
    capacity: {threshold: 50}
    depth_nonzero: {threshold: -2, for: -5s}`,
			[]string{
				`alerts.overrides.orders.pending_cont: no rule is named "pending_cont"`,
				"alerts.overrides.orders.capacity: rule \"capacity\" is of kind capacity, which is global and cannot be overridden per queue",
				"alerts.overrides.orders.depth_nonzero.threshold: must be >= 0, got -2",
				"alerts.overrides.orders.depth_nonzero.for: must be >= 0, got -5s",
			}},
		{"repeat interval", `repeat_interval: -1h`, []string{"alerts.repeat_interval: must be >= 0 (0 never repeats), got -1h0m0s"}},
		{"runbook relative", `runbook_base_url: docs/RUNBOOK.md`, []string{`alerts.runbook_base_url: must be an absolute http:// or https:// URL of the runbook`}},
		{"runbook fragment", `runbook_base_url: "https://wiki.example/dlq#alerts"`, []string{"alerts.runbook_base_url: must not have a #fragment"}},
		{"receivers", `
webhooks:
  - {}
  - {url: "not a url"}
slack:
  - {url: "https://hooks.slack.com/x", timeout: -1s}
alertmanagers:
  - {url: "http://am:9093", generator_url: "/relative"}
  - {name: webhook, url: "http://am2:9093"}`,
			[]string{
				"alerts.webhooks[0].url: required",
				"alerts.webhooks[1].url: must be an absolute http:// or https:// URL",
				"alerts.slack[0].timeout: must be >= 0, got -1s",
				"alerts.alertmanagers[0].generator_url: must be an absolute http:// or https:// URL",
				`alerts.alertmanagers[1].name: "webhook" is already used by alerts.webhooks[0]`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := parse(t, "alerts:\n"+indent(tt.yaml))
			err := c.Validate()
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
			require.Len(t, strings.Split(err.Error(), "\n"), len(tt.want), "every problem once:\n%v", err)
			_, err = c.Notifiers(NotifierDeps{})
			require.Error(t, err, "Notifiers refuses an invalid configuration")
		})
	}
}

func indent(s string) string {
	lines := strings.Split(strings.TrimPrefix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}
