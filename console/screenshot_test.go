package console_test

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
)

// TestScreenshot takes the README's picture of the console (make
// screenshot): the overview of a few queues with a day of arrivals.
// It runs only when DLQ_TEST_SCREENSHOT names the PNG to write.
func TestScreenshot(t *testing.T) {
	out := os.Getenv("DLQ_TEST_SCREENSHOT")
	if out == "" {
		t.Skip("set DLQ_TEST_SCREENSHOT=<file.png> (make screenshot) to take the README's screenshot")
	}
	b := setup(t)
	var msgs []msg
	for i := range 40 {
		msgs = append(msgs, msg{queue: "orders", failureType: "PaymentDeclined", failureMessage: "card declined by issuer"})
		if i%2 == 0 {
			msgs = append(msgs, msg{queue: "emails", failureType: "SMTPTimeout", failureMessage: "smtp.example.net:587 timed out after 30s"})
		}
		if i%5 == 0 {
			msgs = append(msgs, msg{queue: "invoices", failureType: "KeyError", failureMessage: "'customer_id'"})
		}
	}
	b.seed(t, msgs...)
	// A day of arrivals for the charts: a morning incident on orders.
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour)
	for h := 1; h < 24; h++ {
		for q, n := range map[string]int{
			"orders":   int(3 + 60*math.Exp(-math.Pow(float64(h-15), 2)/6)),
			"emails":   2 + h%4,
			"invoices": h % 3,
		} {
			_, err := b.st.Pool().Exec(ctx, `INSERT INTO queue_activity (source_queue, hour, new) VALUES ($1, $2, $3)
ON CONFLICT (source_queue, hour) DO UPDATE SET new = queue_activity.new + EXCLUDED.new`, q, now.Add(-time.Duration(h)*time.Hour), n)
			require.NoError(t, err)
		}
	}
	_, err := b.ops.StartReplay(ctx, ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole},
		ops.ReplayRequest{Request: replay.Request{Filter: &storeFilterOrders, RatePerSecond: 50, DelaySeconds: 600}, Confirm: true})
	require.NoError(t, err)

	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	tb.do(t, chromedp.EmulateViewport(1280, 860), chromedp.Navigate(b.srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`[data-test="queue-row"]`)))
	png := get(t, tb, chromedp.CaptureScreenshot())
	require.NoError(t, os.WriteFile(out, png, 0o644))
	t.Logf("wrote %s (%d bytes)", out, len(png))
}
