package alerts

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// slackMaxAttachments keeps a message well under Slack's limit of 100
// attachments; the rest are counted in the text.
const slackMaxAttachments = 20

// Colours of Slack attachments by status and severity.
const (
	SlackColorFiring   = "#E01E5A" // critical and unknown severities
	SlackColorWarning  = "#ECB22E"
	SlackColorResolved = "#2EB67D"
)

// SlackConfig configures a SlackNotifier. The YAML-tagged fields come from
// the alerts.slack list of the configuration file.
type SlackConfig struct {
	// Name identifies the notifier in logs and metrics. Optional, default
	// "slack".
	Name string `yaml:"name"`
	// URL is the incoming-webhook URL. It is a secret and is never logged.
	// Required.
	URL string `yaml:"url"`
	// Channel, Username and IconEmoji override the webhook's defaults where
	// the receiver allows it (Slack-compatible servers such as Mattermost
	// do). Optional.
	Channel   string `yaml:"channel"`
	Username  string `yaml:"username"`
	IconEmoji string `yaml:"icon_emoji"`
	// Timeout bounds one request when Client is nil. Optional, default
	// HTTPTimeoutDefault.
	Timeout time.Duration `yaml:"timeout"`
	// Client sends the requests. Optional, default a client with Timeout.
	Client *http.Client `yaml:"-"`
}

func (c SlackConfig) validate() error {
	if err := checkHTTPURL(c.URL); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("timeout: must be >= 0, got %s", c.Timeout)
	}
	return nil
}

// SlackMessage is the incoming-webhook body: text for notifications and
// clients without attachments, one coloured attachment per alert.
type SlackMessage struct {
	Channel     string            `json:"channel,omitempty"`
	Username    string            `json:"username,omitempty"`
	IconEmoji   string            `json:"icon_emoji,omitempty"`
	Text        string            `json:"text"`
	Attachments []SlackAttachment `json:"attachments"`
}

// SlackAttachment is one alert.
type SlackAttachment struct {
	Color    string `json:"color"`
	Fallback string `json:"fallback"`
	Title    string `json:"title"`
	// TitleLink makes the title a link to the alert's runbook section.
	TitleLink string       `json:"title_link,omitempty"`
	Text      string       `json:"text"`
	Fields    []SlackField `json:"fields"`
	// Ts is when the alert started (firing) or ended (resolved), Unix seconds.
	Ts int64 `json:"ts"`
}

// SlackField is a short key/value line in an attachment.
type SlackField struct {
	Title string `json:"title"`
	Value string `json:"value"`
	Short bool   `json:"short"`
}

// SlackNotifier posts to a Slack-compatible incoming webhook.
type SlackNotifier struct {
	name   string
	cfg    SlackConfig
	client *http.Client
}

// NewSlackNotifier checks cfg and returns the notifier.
func NewSlackNotifier(cfg SlackConfig) (*SlackNotifier, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("alerts: slack notifier: %w", err)
	}
	return &SlackNotifier{name: cmp.Or(cfg.Name, "slack"), cfg: cfg, client: httpClient(cfg.Client, cfg.Timeout)}, nil
}

// Name implements Notifier.
func (n *SlackNotifier) Name() string { return n.name }

// Notify implements Notifier. Slack answers 429 when rate limited and 5xx
// when unwell (retryable); 400/403/404 mean a bad payload, a revoked hook or
// a missing channel, which a retry will not fix.
func (n *SlackNotifier) Notify(ctx context.Context, alerts ...Alert) (bool, error) {
	return postJSON(ctx, n.client, n.cfg.URL, nil, n.message(alerts))
}

func (n *SlackNotifier) message(alerts []Alert) SlackMessage {
	var firing, resolved int
	for _, a := range alerts {
		if a.Status == StatusFiring {
			firing++
		} else {
			resolved++
		}
	}
	var parts []string
	if firing > 0 {
		parts = append(parts, fmt.Sprintf(":rotating_light: %d firing", firing))
	}
	if resolved > 0 {
		parts = append(parts, fmt.Sprintf(":white_check_mark: %d resolved", resolved))
	}
	text := "dlq alerts: " + strings.Join(parts, ", ")
	if len(alerts) == 1 {
		text = fmt.Sprintf("[%s] %s", strings.ToUpper(string(alerts[0].Status)), alerts[0].Annotations[AnnotationSummary])
	}
	m := SlackMessage{Channel: n.cfg.Channel, Username: n.cfg.Username, IconEmoji: n.cfg.IconEmoji, Text: text}
	for i, a := range alerts {
		if i == slackMaxAttachments {
			m.Text += fmt.Sprintf(" (%d more not shown)", len(alerts)-i)
			break
		}
		m.Attachments = append(m.Attachments, slackAttachment(a))
	}
	return m
}

func slackAttachment(a Alert) SlackAttachment {
	color, ts := SlackColorFiring, a.StartsAt
	switch {
	case a.Status == StatusResolved:
		color, ts = SlackColorResolved, a.EndsAt
	case a.Severity == SeverityWarning:
		color = SlackColorWarning
	}
	title := fmt.Sprintf("[%s] %s", strings.ToUpper(string(a.Status)), a.Annotations[AnnotationSummary])
	fields := []SlackField{
		{Title: "Rule", Value: a.Rule, Short: true},
		{Title: "Severity", Value: a.Severity, Short: true},
		{Title: "Value", Value: formatValue(a.Kind, a.Value), Short: true},
		{Title: "Threshold", Value: formatValue(a.Kind, a.Threshold), Short: true},
	}
	if a.SourceQueue != "" {
		fields = append(fields, SlackField{Title: "Source queue", Value: a.SourceQueue, Short: true})
	}
	switch a.Kind {
	case KindPolicyPaused:
		fields = append(fields, SlackField{Title: "Policy", Value: a.Subject, Short: true})
	case KindApprovalPending:
		fields = append(fields, SlackField{Title: "Approval request", Value: a.Subject, Short: true})
	}
	return SlackAttachment{
		Color: color, Fallback: title, Title: title, TitleLink: a.Annotations[AnnotationRunbookURL],
		Text: a.Annotations[AnnotationDescription], Fields: fields, Ts: ts.Unix(),
	}
}
