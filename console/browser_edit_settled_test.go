package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
)

// TestBrowserMessageStopsRefreshingOnceTheCopySettled: a message's page
// refreshes itself while its edited copy is being sent; once the copy has
// settled (sent, or not sent with its reason) and the page shows it, the
// page asks nothing more and says so. The replay service starts only
// after the page is open, so the page is seen refreshing first.
func TestBrowserMessageStopsRefreshingOnceTheCopySettled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, state string
		declare     bool // the source queue exists: the copy is routed
	}{
		{"sent", "sent", true},
		{"not sent", "failed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			queue := dlqtest.Name(t, "gone")
			if tc.declare {
				queue, _ = sourceQueue(t)
			}
			st, dsn := dlqtest.Store(t)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "console-test", Logger: log})
			require.NoError(t, err)
			t.Cleanup(conn.Close)
			rp, err := replay.New(replay.Config{Store: st, Conn: conn, PollInterval: 50 * time.Millisecond, Logger: log,
				Registerer: prometheus.NewRegistry()})
			require.NoError(t, err)
			b := setup(t, func(o *setupOpts) { o.store, o.dsn, o.replayer = st, dsn, rp })
			id := strconv.FormatInt(b.seed(t, msg{queue: queue, body: []byte(`{"sku":"A"}`)})[0], 10)
			r := b.signIn(t, tokOp).act(t, "/ui/messages/"+id+"/edit", url.Values{"binary": {"0"}, "body": {`{"sku":"B"}`}, "send": {"1"}})
			require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)

			tb := newTab(t, b)
			tb.signIn(t, tokOp)
			tb.open(t, "/ui/messages/"+id)
			require.Equal(t, []string{"being sent"}, tb.texts(t, `[data-test="edit-state"]`))
			require.Equal(t, "Pause auto-refresh", tb.texts(t, `[data-test="auto-refresh"]`)[0], "refreshed while the copy is on its way")
			tb.do(t, chromedp.Evaluate[chromedp.Void](markFetches))
			tb.eventually(t, 15*time.Second, `performance.getEntriesByType("resource").some(e => e.initiatorType === "fetch" && e.startTime >= window.dlqSince)`,
				"the page refreshes while the copy waits")

			runReplays(t, rp)
			tb.eventually(t, 30*time.Second, `(document.querySelector('[data-test="edit-state"]') || {}).dataset.state === `+strconv.Quote(tc.state),
				"the page shows the copy "+tc.name)
			if tc.state == "failed" {
				require.Regexp(t, `^not sent: .+`, tb.texts(t, `[data-test="edit-state"]`)[0], "with its reason")
			}
			require.NotContains(t, tb.texts(t, `[data-test="message-status"]`)[0], "this page follows it")

			// Settled: nothing more is fetched. The page would ask again
			// 5 s after its last answer; a bounded wait past two such
			// periods shows it does not (something NOT happening has no
			// event to poll for).
			tb.do(t, chromedp.Evaluate[chromedp.Void](markFetches))
			time.Sleep(11 * time.Second)
			n, _ := tb.fetches(t)
			require.Zero(t, n, "no refresh once the copy has settled")
			require.Contains(t, tb.texts(t, `[data-test="updated-ago"]`)[0], "auto-refresh stopped: nothing left to follow")
			require.Zero(t, tb.count(t, `[data-test="auto-refresh"]:not([hidden])`), "no pause button for a refresh that ended")
			tb.quiet(t)
		})
	}
}

// runReplays runs rp until the test ends.
func runReplays(t *testing.T, rp *replay.Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
