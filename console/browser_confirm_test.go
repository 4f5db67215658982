package console_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestBrowserReplayConfirmWarnsOfAMissingExchange: the confirmation of a
// replay to an exchange the broker does not have says that nothing would
// be published; one to an exchange that exists, or to each message's
// source, says nothing of the kind.
func TestBrowserReplayConfirmWarnsOfAMissingExchange(t *testing.T) {
	t.Parallel()
	q, _ := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	ids := b.seed(t, many(1, q)...)
	page := "/ui/messages/" + strconv.FormatInt(ids[0], 10)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	confirm := func(exchange string) []string {
		t.Helper()
		tb.open(t, page)
		tb.do(t, chromedp.Evaluate[chromedp.Void](`document.querySelector('input[name="target_exchange"]').value = `+strconv.Quote(exchange)+`;`+
			`document.querySelector('input[name="target_routing_key"]').value = "k"`))
		tb.submit(t, `[data-test="action-replay"]`)
		require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Replay 1 message?")
		return tb.texts(t, `[data-test="target-missing"]`)
	}
	missing := dlqtest.Name(t, "walk.nope")
	warn := confirm(missing)
	require.Len(t, warn, 1)
	require.Contains(t, warn[0], `Exchange "`+missing+`" does not exist on the broker: nothing would be published`)
	require.Empty(t, confirm("amq.topic"), "amq.topic exists")
	tb.open(t, page)
	tb.submit(t, `[data-test="action-replay"]`)
	require.Zero(t, tb.count(t, `[data-test="target-missing"]`), "to its source: nothing to look up")
	require.False(t, strings.Contains(strings.Join(tb.texts(t, `main`), " "), "does not exist"))
	tb.quiet(t)
}
