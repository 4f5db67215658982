package alerts

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// EvalIntervalDefault is the assumed time between evaluations when an
// AlertmanagerConfig does not say.
const EvalIntervalDefault = time.Minute

// alertmanagerEndsAtFactor: a firing alert is sent with endsAt this many
// evaluation intervals ahead. Missing up to three evaluations (a slow tick, a
// lease moving to another instance) keeps it firing; if dlq stops evaluating
// altogether, Alertmanager resolves it rather than keep it forever.
const alertmanagerEndsAtFactor = 4

// AlertmanagerConfig configures an AlertmanagerNotifier. The YAML-tagged
// fields come from the alerts.alertmanagers list of the configuration file.
type AlertmanagerConfig struct {
	// Name identifies the notifier in logs and metrics. Optional, default
	// "alertmanager".
	Name string `yaml:"name"`
	// URL is Alertmanager's base URL, e.g. http://alertmanager:9093; alerts
	// go to URL/api/v2/alerts. Required.
	URL string `yaml:"url"`
	// Headers are added to every request, e.g. Authorization for a proxy in
	// front of Alertmanager. Never logged. Optional.
	Headers map[string]string `yaml:"headers"`
	// GeneratorURL links each alert back to dlq, e.g.
	// http://dlq.internal:8080/api/v1/alerts. Optional.
	GeneratorURL string `yaml:"generator_url"`
	// EvalInterval is how often alerts are evaluated (the cron schedule of
	// the alert check). Firing alerts are sent with endsAt = now +
	// 4*EvalInterval and refreshed on every evaluation. Optional, default
	// EvalIntervalDefault.
	EvalInterval time.Duration `yaml:"eval_interval"`
	// Timeout bounds one request when Client is nil. Optional, default
	// HTTPTimeoutDefault.
	Timeout time.Duration `yaml:"timeout"`
	// Client sends the requests. Optional, default a client with Timeout.
	Client *http.Client `yaml:"-"`
	// Now is the clock for endsAt of firing alerts. Optional, default
	// time.Now.
	Now func() time.Time `yaml:"-"`
}

func (c AlertmanagerConfig) validate() error {
	if err := checkHTTPURL(c.URL); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if c.GeneratorURL != "" {
		if err := checkHTTPURL(c.GeneratorURL); err != nil {
			return fmt.Errorf("generator_url: %w", err)
		}
	}
	if c.EvalInterval < 0 {
		return fmt.Errorf("eval_interval: must be >= 0, got %s", c.EvalInterval)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("timeout: must be >= 0, got %s", c.Timeout)
	}
	return nil
}

// AlertmanagerAlert is one element of the array posted to
// /api/v2/alerts.
type AlertmanagerAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// AlertmanagerNotifier posts alerts to Alertmanager's v2 API. Alertmanager
// owns grouping, silences, inhibition and routing; dlq only keeps it told.
//
// endsAt: a resolved alert carries its resolve time, which resolves it in
// Alertmanager at once. A firing alert carries now + 4 evaluation intervals
// rather than no endsAt, because without one Alertmanager applies its own
// resolve_timeout (5m by default), and dlq's behaviour would then depend on
// a setting in another system. Because the endsAt is near, the notifier is a
// Refresher: every evaluation re-sends every firing alert, exactly as
// Prometheus does, and Alertmanager deduplicates.
type AlertmanagerNotifier struct {
	name     string
	endpoint string
	cfg      AlertmanagerConfig
	client   *http.Client
}

// NewAlertmanagerNotifier checks cfg and returns the notifier.
func NewAlertmanagerNotifier(cfg AlertmanagerConfig) (*AlertmanagerNotifier, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("alerts: alertmanager notifier: %w", err)
	}
	endpoint, err := url.JoinPath(cfg.URL, "/api/v2/alerts")
	if err != nil {
		return nil, fmt.Errorf("alerts: alertmanager notifier: url: %w", err)
	}
	cfg.EvalInterval = cmp.Or(cfg.EvalInterval, EvalIntervalDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &AlertmanagerNotifier{
		name: cmp.Or(cfg.Name, "alertmanager"), endpoint: endpoint, cfg: cfg,
		client: httpClient(cfg.Client, cfg.Timeout),
	}, nil
}

// Name implements Notifier.
func (n *AlertmanagerNotifier) Name() string { return n.name }

// RefreshFiring implements Refresher.
func (n *AlertmanagerNotifier) RefreshFiring() bool { return true }

// Notify implements Notifier. Alertmanager answers 400 for alerts it cannot
// accept (not retryable) and 5xx while unhealthy (retryable).
func (n *AlertmanagerNotifier) Notify(ctx context.Context, alerts ...Alert) (bool, error) {
	return postJSON(ctx, n.client, n.endpoint, n.cfg.Headers, n.payload(alerts))
}

func (n *AlertmanagerNotifier) payload(alerts []Alert) []AlertmanagerAlert {
	firingEnd := n.cfg.Now().UTC().Add(alertmanagerEndsAtFactor * n.cfg.EvalInterval)
	out := make([]AlertmanagerAlert, 0, len(alerts))
	for _, a := range alerts {
		endsAt := a.EndsAt
		if a.Status == StatusFiring {
			endsAt = firingEnd
		}
		out = append(out, AlertmanagerAlert{
			Labels: a.Labels, Annotations: a.Annotations,
			StartsAt: a.StartsAt, EndsAt: endsAt, GeneratorURL: n.cfg.GeneratorURL,
		})
	}
	return out
}
