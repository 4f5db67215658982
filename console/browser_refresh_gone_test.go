package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
)

// TestBrowserRefreshedMessageDeleted: a message's page left refreshing
// (its edited copy waits to be sent: no replay service runs) whose message
// someone else then deletes says, in words, that it was deleted, keeps the
// link to its queue's messages and stops refreshing, instead of "could
// not refresh (HTTP 404); trying again" for ever.
func TestBrowserRefreshedMessageDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queue := dlqtest.Name(t, "gone")
	n := b.seed(t, msg{queue: queue, body: []byte(`{"sku":"A"}`)})[0]
	id := strconv.FormatInt(n, 10)
	r := b.signIn(t, tokOp).act(t, "/ui/messages/"+id+"/edit", url.Values{"binary": {"0"}, "body": {`{"sku":"B"}`}, "send": {"1"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)

	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages/"+id)
	require.Equal(t, "Pause auto-refresh", tb.texts(t, `[data-test="auto-refresh"]`)[0], "refreshed while the copy is on its way")

	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	_, err := b.ops.Delete(context.Background(), admin, ops.ActionRequest{IDs: []int64{n}})
	require.NoError(t, err)

	tb.eventually(t, 30*time.Second, `document.querySelector('[data-test="message-gone"]') !== null`,
		"the page says the message is gone")
	require.Equal(t, []string{"Message " + id + " was deleted"}, tb.texts(t, `[data-test="message-gone"] h1`))
	require.Equal(t, []string{"/ui/messages?source_queue=" + queue}, tb.attrs(t, `[data-test="message-queue"]`, "href"),
		"the link to its queue's messages stays")
	label := tb.texts(t, `[data-test="updated-ago"]`)[0]
	require.Contains(t, label, "auto-refresh stopped: what this page showed no longer exists")
	require.NotContains(t, label, "could not refresh")

	// Stopped: nothing more is fetched. The page would ask again 5 s
	// after its last answer; a bounded wait past two such periods shows
	// it does not (something NOT happening has no event to poll for).
	tb.do(t, chromedp.Evaluate[chromedp.Void](markFetches))
	time.Sleep(11 * time.Second)
	f, _ := tb.fetches(t)
	require.Zero(t, f, "no refresh once the message is gone")
}
