package console_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// choose picks value in the select sel, which applies it at once (the page
// size, the sort), and waits for the page that answers.
func (tb *tab) choose(t *testing.T, sel, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	tb.do(t, chromedp.WaitVisible(chromedp.CSS(sel)))
	resp, err := chromedp.RunResponse(ctx, chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector(`+strconv.Quote(sel)+`);
		s.value = `+strconv.Quote(value)+`; s.dispatchEvent(new Event("change", {bubbles: true})); })()`))
	require.NoError(t, err)
	require.NotNil(t, resp)
	tb.do(t, chromedp.WaitVisible(chromedp.CSS(`main h1`)))
}

// TestBrowserNoSideScrollAt800: at 800 px wide, no console page scrolls
// sideways (the document is no wider than the window), with long queue
// names, failure texts and header values on them.
func TestBrowserNoSideScrollAt800(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 3 })
	long := "orders.eu-west-1.payments.settlement.retry-queue-with-a-rather-long-name"
	ids := b.seed(t, append(many(5, long), msg{queue: "billing", failureType: "System.InvalidOperationException",
		failureMessage: strings.Repeat("The invoice INV-2024-000123 could not be mapped because the customer reference was missing ", 4),
		headers:        `{"x-trace-id":"` + strings.Repeat("a1b2c3d4e5f6", 12) + `","x-exception-message":"mapping failed"}`,
		body:           []byte(`{"invoice":{"id":"INV-2024-000123","lines":[{"sku":"` + strings.Repeat("X", 300) + `"}]}}`)})...)
	ctx := context.Background()
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	_, err := b.ops.Acknowledge(ctx, ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole},
		ops.ActionRequest{Filter: &store.Filter{SourceQueue: long}, Confirm: true})
	var pa *ops.PendingApproval
	require.True(t, errors.As(err, &pa), "an approval request to show: %v", err)
	task, err := b.ops.StartReplay(ctx, admin, ops.ReplayRequest{Request: replay.Request{IDs: ids[:1]}})
	require.NoError(t, err)
	groups, err := b.ops.Groups(ctx, admin, store.GroupQuery{})
	require.NoError(t, err)
	require.NotEmpty(t, groups)

	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	tb.do(t, chromedp.EmulateViewport(800, 900))
	id := strconv.FormatInt(ids[5], 10)
	for _, path := range []string{"/ui/", "/ui/messages", "/ui/messages?q=invoice&source_queue=billing", "/ui/messages/" + id,
		"/ui/groups", "/ui/groups/" + groups[0].ID, "/ui/replays", "/ui/replays/" + strconv.FormatInt(task.ID, 10),
		"/ui/approvals", "/ui/jobs", "/ui/audit", "/ui/messages/" + id + "/edit"} {
		tb.open(t, path)
		w := get(t, tb, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
		require.LessOrEqual(t, w[0], w[1], "%s scrolls sideways: %d px wide in %d", path, w[0], w[1])
	}
	tb.quiet(t)
}

// TestBrowserListingPagesAndSorts: page size 50, 100 or 500; Previous
// goes back a keyset page (no offset); sorting by source queue and by
// failed time; the bulk bar says how many rows are selected and stays in
// view while the list scrolls; a skip link reaches the results.
func TestBrowserListingPagesAndSorts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, append(many(110, "orders"), many(10, "audit")...)...)
	// The oldest message died again a minute ago: first by failed time.
	_, err := b.db.Exec(context.Background(), `UPDATE dead_messages SET failed_at = now() + interval '1 minute' WHERE id = $1`, ids[0])
	require.NoError(t, err)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages")
	require.Len(t, tb.rowIDs(t), 50)
	tb.choose(t, `[data-test="page-size"]`, "100")
	first := tb.rowIDs(t)
	require.Len(t, first, 100)
	require.True(t, slices.IsSortedFunc(first, func(a, b int64) int { return int(b - a) }), "newest first")
	require.Zero(t, tb.count(t, `[data-test="prev-page"]`), "no page before the first")
	tb.submit(t, `[data-test="next-page"]`)
	second := tb.rowIDs(t)
	require.Len(t, second, 20)
	require.Contains(t, tb.texts(t, `#count`)[0], "showing 101 to 120")
	tb.submit(t, `[data-test="prev-page"]`)
	require.Equal(t, first, tb.rowIDs(t), "Previous shows the page before again")
	require.Zero(t, tb.count(t, `[data-test="prev-page"]`))

	tb.choose(t, `[data-test="sort"]`, "queue")
	byQueue := tb.rowIDs(t)
	require.Len(t, byQueue, 100)
	require.ElementsMatch(t, ids[110:], byQueue[:10], "audit before orders")
	tb.submit(t, `[data-test="next-page"]`)
	tb.submit(t, `[data-test="prev-page"]`)
	require.Equal(t, byQueue, tb.rowIDs(t))
	tb.choose(t, `[data-test="sort"]`, "failed")
	require.Equal(t, ids[0], tb.rowIDs(t)[0], "the latest death first, though its id is the oldest")

	// A quick range sets the start time; the rate a replay starts with is
	// the same here as on the failure groups.
	tb.open(t, "/ui/messages?source_queue=orders")
	tb.do(t, click(`details.more-filters summary`))
	tb.submit(t, `[data-test="time-range"]`)
	require.Contains(t, get(t, tb, chromedp.Location()), "failed_after=")
	require.Len(t, tb.rowIDs(t), 50, "the last hour holds them")
	require.Equal(t, []string{"50"}, tb.attrs(t, `[data-test="bulk-replay"] ~ details input[name="rate"]`, "value"))
	tb.open(t, "/ui/groups")
	rates := tb.attrs(t, `[data-test="group-row"] input[name="rate"]`, "value")
	require.NotEmpty(t, rates)
	for _, r := range rates {
		require.Equal(t, "50", r, "one default rate")
	}

	// The bulk bar counts the selection and stays in view.
	tb.do(t, chromedp.EmulateViewport(800, 700))
	tb.open(t, "/ui/messages?source_queue=orders")
	require.Equal(t, "0 selected", tb.texts(t, `[data-test="selected-count"]`)[0])
	tb.do(t, click(`[data-test="message-row"]:nth-child(1) [data-test="select"]`),
		click(`[data-test="message-row"]:nth-child(2) [data-test="select"]`))
	require.Equal(t, "2 selected", tb.texts(t, `[data-test="selected-count"]`)[0])
	tb.do(t, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, document.body.scrollHeight / 2)`))
	top := get(t, tb, chromedp.Evaluate[float64](`document.querySelector('fieldset.actions').getBoundingClientRect().top`))
	require.InDelta(t, 0, top, 1, "the bar sticks to the top of the window")
	tb.do(t, click(`[data-test="select-all-matching"]`))
	require.Contains(t, tb.texts(t, `[data-test="selected-count"]`)[0], "All 110 matching selected")

	// From the top of the page, the keyboard reaches the first row in
	// fewer Tabs than before (43), and in three keys by the skip link.
	tb.open(t, "/ui/messages?source_queue=orders")
	tb.do(t, chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`))
	inFirstRow := `!!(document.activeElement && document.activeElement.closest('[data-test="message-row"]'))`
	tabs := 0
	for ; tabs < 60 && !get(t, tb, chromedp.Evaluate[bool](inFirstRow)); tabs++ {
		tb.do(t, chromedp.KeyEvent("\t"))
	}
	t.Logf("%d Tabs to the first row", tabs)
	require.LessOrEqual(t, tabs, 30, "Tabs to the first row")
	tb.open(t, "/ui/messages?source_queue=orders")
	tb.do(t, chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`),
		chromedp.KeyEvent("\t"), chromedp.KeyEvent("\t"))
	require.Equal(t, "Skip to the results", get(t, tb, chromedp.Evaluate[string](`document.activeElement.textContent`)))
	tb.do(t, chromedp.KeyEvent("\r"), chromedp.KeyEvent("\t"))
	require.True(t, get(t, tb, chromedp.Evaluate[bool](inFirstRow)), "Tab, Tab, Enter, Tab: the first row")
	tb.quiet(t)
}
