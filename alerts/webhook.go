package alerts

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"
)

// WebhookPayloadVersion is the "version" field of the generic webhook body.
// It changes only if a field changes meaning or disappears.
const WebhookPayloadVersion = "1"

// WebhookConfig configures a WebhookNotifier. The YAML-tagged fields come
// from the alerts.webhooks list of the configuration file.
type WebhookConfig struct {
	// Name identifies the notifier in logs and metrics. Optional, default
	// "webhook".
	Name string `yaml:"name"`
	// URL receives the POST. Required.
	URL string `yaml:"url"`
	// Headers are added to every request, e.g. Authorization. Their values
	// are never logged. Optional.
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one request when Client is nil. Optional, default
	// HTTPTimeoutDefault.
	Timeout time.Duration `yaml:"timeout"`
	// Client sends the requests. Optional, default a client with Timeout.
	Client *http.Client `yaml:"-"`
}

func (c WebhookConfig) validate() error {
	if err := checkHTTPURL(c.URL); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("timeout: must be >= 0, got %s", c.Timeout)
	}
	return nil
}

// WebhookPayload is the body a WebhookNotifier posts. Status is "firing" if
// any alert in the batch is firing, else "resolved"; each alert has its own
// status too.
type WebhookPayload struct {
	Version string  `json:"version"`
	Status  Status  `json:"status"`
	Alerts  []Alert `json:"alerts"`
}

// WebhookNotifier posts alerts as generic JSON (WebhookPayload) to any HTTP
// endpoint.
type WebhookNotifier struct {
	name    string
	url     string
	headers map[string]string
	client  *http.Client
}

// NewWebhookNotifier checks cfg and returns the notifier.
func NewWebhookNotifier(cfg WebhookConfig) (*WebhookNotifier, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("alerts: webhook notifier: %w", err)
	}
	return &WebhookNotifier{
		name: cmp.Or(cfg.Name, "webhook"), url: cfg.URL, headers: cfg.Headers,
		client: httpClient(cfg.Client, cfg.Timeout),
	}, nil
}

// Name implements Notifier.
func (n *WebhookNotifier) Name() string { return n.name }

// Notify implements Notifier.
func (n *WebhookNotifier) Notify(ctx context.Context, alerts ...Alert) (bool, error) {
	p := WebhookPayload{Version: WebhookPayloadVersion, Status: batchStatus(alerts), Alerts: alerts}
	return postJSON(ctx, n.client, n.url, n.headers, p)
}

func batchStatus(alerts []Alert) Status {
	for _, a := range alerts {
		if a.Status == StatusFiring {
			return StatusFiring
		}
	}
	return StatusResolved
}
