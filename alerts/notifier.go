package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/dlq/dlq/internal/redact"
)

// Notifier delivers alerts to one receiver.
//
// Notify sends all alerts in one delivery (one request for HTTP receivers)
// and reports whether a failure is worth retrying: retryable is true only
// when sending the very same alerts again may succeed (network error, 5xx,
// 429). A receiver that rejected the payload (other 4xx) will reject it
// again, so it is not retryable. Notify must honour ctx, must not modify the
// alerts (they are shared between notifiers), and must be safe for concurrent
// use. Receivers must tolerate an occasional duplicate: a retry after a
// timeout may deliver twice.
type Notifier interface {
	// Name identifies the notifier in logs and in the notifier label of
	// dlq_alert_notifications_total. Unique within a Dispatcher.
	Name() string
	Notify(ctx context.Context, alerts ...Alert) (retryable bool, err error)
}

// Refresher is implemented by notifiers whose receiver forgets an alert that
// is not sent again (Alertmanager resolves an alert once its endsAt passes).
// When RefreshFiring returns true the Dispatcher sends such a notifier every
// firing alert on every evaluation, not only the changes; the receiver
// deduplicates.
type Refresher interface {
	RefreshFiring() bool
}

// HTTPTimeoutDefault bounds one HTTP delivery when no http.Client is given.
const HTTPTimeoutDefault = 10 * time.Second

// errorBodyLimit bounds how much of an error response is quoted in the error.
const errorBodyLimit = 512

func httpClient(c *http.Client, timeout time.Duration) *http.Client {
	if c != nil {
		return c
	}
	if timeout <= 0 {
		timeout = HTTPTimeoutDefault
	}
	return &http.Client{Timeout: timeout}
}

// postJSON sends body as JSON and classifies the outcome for the retry
// contract. Errors name the receiver by scheme and host only: webhook URLs
// (Slack's above all) carry their secret in the path.
func postJSON(ctx context.Context, client *http.Client, target string, headers map[string]string, body any) (retryable bool, err error) {
	where := redact.Webhook(target)
	b, err := json.Marshal(body)
	if err != nil {
		return false, fmt.Errorf("encode payload for %s: %w", where, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(b))
	if err != nil {
		return false, fmt.Errorf("build request for %s: %w", where, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dlq-alerts")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		// *url.Error repeats the full URL; keep only the cause.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return false, fmt.Errorf("post to %s: %w", where, context.Cause(ctx))
		}
		return true, fmt.Errorf("post to %s: %w", where, err)
	}
	defer func() {
		// Drain so the connection can be reused, within reason.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return false, nil
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	err = fmt.Errorf("post to %s: status %d: %s", where, resp.StatusCode, strings.TrimSpace(string(snippet)))
	return resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests, err
}

func checkHTTPURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an absolute http:// or https:// URL, got %q", redact.Webhook(s))
	}
	return nil
}
