package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// TestBrowserFieldFilters: body field filters added in the filter bar list
// exactly the messages whose JSON bodies match, stay in the address, and
// go with "acknowledge all matching", which changes those and no other; an
// invalid path, and a field filter nothing else bounds, come back as the
// messages page with the layer's message in the flash.
func TestBrowserFieldFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := func(queue, s string) msg {
		return msg{queue: queue, failureType: "OrderRejected", failureMessage: "rejected by rule", body: []byte(s)}
	}
	ids := b.seed(t,
		body("orders", `{"order":{"id":42,"tier":"gold"}}`),
		body("orders", `{"order":{"id":42,"tier":"silver"},"note":"second"}`),
		body("orders", `{"order":{"id":7,"tier":"gold"}}`),
		body("orders", `{"order":{"id":"42"}}`),
		body("orders", `order 42, not JSON`),
		body("billing", `{"order":{"id":42,"tier":"gold"}}`),
	)
	want := []int64{ids[0], ids[1]}
	tb := newTab(t, b)
	tb.signIn(t, tokOp)

	// Typed into the bar: the address keeps it, the rows are exactly the
	// two whose order.id is the number 42 in this queue.
	tb.open(t, "/ui/messages?source_queue=orders")
	require.Equal(t, 1, tb.count(t, `[data-test="field-filter"]`), "one empty row to type in")
	tb.do(t, chromedp.SendKeys(chromedp.CSS(`[data-test="field-filter"]`), "order.id=42"))
	tb.submit(t, `form.filters button[type="submit"]`)
	require.ElementsMatch(t, want, tb.rowIDs(t))
	loc := get(t, tb, chromedp.Location())
	require.Contains(t, loc, "field=order.id%3D42")
	require.NotContains(t, loc, "field=&", "an empty row is left out of the address")
	require.Contains(t, tb.texts(t, `#count`)[0], "2 matching", "the listing ended: exact")

	// A second filter through "Add field filter" narrows to one; removing
	// it again widens back.
	tb.do(t, click(`[data-test="add-field"]`))
	require.Equal(t, 3, tb.count(t, `[data-test="field-filter"]`))
	tb.do(t, chromedp.SendKeys(chromedp.CSS(`span.field-filter:last-of-type [data-test="field-filter"]`), "order.tier=gold"))
	tb.submit(t, `form.filters button[type="submit"]`)
	require.ElementsMatch(t, []int64{ids[0]}, tb.rowIDs(t))
	require.Equal(t, []string{"order.id=42", "order.tier=gold", ""}, tb.attrs(t, `[data-test="field-filter"]`, "value"))
	tb.do(t, click(`span.field-filter:nth-of-type(2) [data-test="remove-field"]`))
	tb.submit(t, `form.filters button[type="submit"]`)
	require.ElementsMatch(t, want, tb.rowIDs(t))

	// Opened from an address: the filter is applied and shown.
	tb.open(t, "/ui/messages?source_queue=orders&field=order.id%3D42")
	require.ElementsMatch(t, want, tb.rowIDs(t))
	require.Equal(t, "order.id=42", tb.attrs(t, `[data-test="field-filter"]`, "value")[0])

	// Acknowledge all matching: the confirmation names the field filter and
	// counts two; only those two change.
	tb.do(t, click(`[data-test="select-all-matching"]`))
	tb.submit(t, `[data-test="bulk-ack"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Acknowledge 2 messages?")
	require.Contains(t, tb.texts(t, `#confirm-what`)[0], "body field order.id=42")
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "Acknowledged 2 messages")
	st := b.statuses(t, ids)
	for i, id := range ids {
		wantStatus := store.StatusPending
		if i < 2 {
			wantStatus = store.StatusAcknowledged
		}
		require.Equal(t, wantStatus, st[id], "message %d (seed %d)", id, i)
	}

	tb.quiet(t)

	// Refused filters: the page answers 400 with the bar as typed and the
	// reason in the flash, not an empty page. The browser logs each 400
	// load, and nothing else may appear.
	for _, c := range []struct{ path, typed, says string }{
		{"/ui/messages?source_queue=orders&field=order..id%3D1", "order..id=1", "empty path segment"},
		{"/ui/messages?field=order.id%3D42", "order.id=42", "add Source queue"},
	} {
		ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
		resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(b.srv.URL+c.path))
		cancel()
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusBadRequest), resp.Status, c.path)
		flash := tb.flash(t)
		require.True(t, strings.HasPrefix(flash, "Error:"), "flash %q", flash)
		require.Contains(t, flash, c.says)
		require.Equal(t, c.typed, tb.attrs(t, `[data-test="field-filter"]`, "value")[0], "the bar shows the filter to correct")
		require.Zero(t, tb.count(t, `[data-test="message-row"]`))
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, a := range tb.alarms {
		require.Contains(t, a, "status of 400", "the page raised more than its 400 loads")
	}
}
