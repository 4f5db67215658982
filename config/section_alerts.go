package config

import (
	"fmt"

	"github.com/dlq/dlq/alerts"
)

// Alerts configures the alert rules and receivers. Its YAML is the alerts
// package's Config, inline (rules, overrides, repeat_interval,
// runbook_base_url, webhooks, slack, alertmanagers; see alerts.Config), so
// the alerts feature owns the format. The environment sets the runbook and
// adds one receiver of each kind:
//
//	DLQ_RUNBOOK_BASE_URL    where docs/RUNBOOK.md is read (alerts.runbook_base_url)
//	DLQ_ALERT_WEBHOOK_URL   a generic JSON webhook
//	DLQ_SLACK_WEBHOOK_URL   a Slack-compatible incoming webhook
//	DLQ_ALERTMANAGER_URL    an Alertmanager base URL (alerts go to /api/v2/alerts)
type Alerts struct {
	alerts.Config `yaml:",inline"`
}

func defaultAlerts() Alerts {
	return Alerts{Config: alerts.Config{RunbookBaseURL: alerts.RunbookBaseURLDefault}}
}

// alertsEnvVars lists the environment variables of the alerts section.
func alertsEnvVars() []envVar {
	return []envVar{
		{"DLQ_RUNBOOK_BASE_URL", strVar(func(c *Config) *string { return &c.Alerts.RunbookBaseURL })},
		{"DLQ_ALERT_WEBHOOK_URL", func(c *Config, v string) error {
			c.Alerts.Webhooks = append(c.Alerts.Webhooks, alerts.WebhookConfig{URL: v})
			return nil
		}},
		{"DLQ_SLACK_WEBHOOK_URL", func(c *Config, v string) error {
			c.Alerts.Slack = append(c.Alerts.Slack, alerts.SlackConfig{URL: v})
			return nil
		}},
		{"DLQ_ALERTMANAGER_URL", func(c *Config, v string) error {
			c.Alerts.Alertmanagers = append(c.Alerts.Alertmanagers, alerts.AlertmanagerConfig{URL: v})
			return nil
		}},
	}
}

// validateAlerts checks the alerts section; the alerts package names each
// wrong field as written in YAML (alerts.rules[2].for, alerts.slack[0].url).
func (c *Config) validateAlerts() []error {
	if err := c.Alerts.Config.Validate(); err != nil {
		return []error{fmt.Errorf("config: %w (DLQ_RUNBOOK_BASE_URL sets alerts.runbook_base_url; receivers from DLQ_ALERT_WEBHOOK_URL, DLQ_SLACK_WEBHOOK_URL and DLQ_ALERTMANAGER_URL come after those of the file)", err)}
	}
	return nil
}
