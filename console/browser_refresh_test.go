package console_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// approvalsWithOneRequest opens, as the admin, the approvals page
// (refreshed by default) with one request an operator made, and returns
// the tab and the request's row id.
func approvalsWithOneRequest(t *testing.T) (*tab, string) {
	t.Helper()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 1 })
	ids := b.seed(t, many(2, "orders")...)
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_source_queue": {"orders"},
		"max_id": {strconv.FormatInt(ids[1], 10)}, "back": {"/ui/messages"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	tb.open(t, "/ui/approvals")
	rows := tb.attrs(t, `[data-test="approval-row"]`, "data-id")
	require.Len(t, rows, 1)
	return tb, rows[0]
}

// TestBrowserRefreshKeepsTypedReason: on the approvals page (refreshed by
// default), a reject reason typed and left (the field no longer focused)
// holds the refresh off past two periods, and the text stays; put back
// to empty, the page refreshes again.
func TestBrowserRefreshKeepsTypedReason(t *testing.T) {
	t.Parallel()
	tb, row := approvalsWithOneRequest(t)
	rows := []string{row}
	reason := `document.getElementById("reason-` + rows[0] + `")`
	require.Equal(t, "Pause auto-refresh", tb.texts(t, `[data-test="auto-refresh"]`)[0], "on by default")
	tb.do(t, click(`#reason-`+rows[0]), chromedp.SendKeys(chromedp.CSS(`#reason-`+rows[0]), "wrong queue"),
		chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); window.dlqMark = 1`))

	// "Updated N s ago" counts from the last refresh: past two periods
	// with the reason still there, nothing was refreshed over it.
	tb.eventually(t, 30*time.Second, `(() => {
		const m = /Updated (\d+) s ago/.exec(document.querySelector('[data-test="updated-ago"]').textContent);
		return `+reason+`.value !== "wrong queue" || (m !== null && Number(m[1]) >= 11);
	})()`, "two periods pass, or the reason is erased")
	require.Equal(t, "wrong queue", get(t, tb, chromedp.Evaluate[string](reason+`.value`)), "the typed reason is kept")
	require.Contains(t, tb.texts(t, `[data-test="updated-ago"]`)[0], "paused while a form has unsent changes")
	require.True(t, get(t, tb, chromedp.Evaluate[bool](`window.dlqMark === 1`)), "no reload")

	// Emptied again, the form holds nothing unsent: the page refreshes.
	tb.do(t, chromedp.Evaluate[chromedp.Void](reason+`.value = ""; `+reason+`.dispatchEvent(new Event("input", {bubbles: true})); `+markFetches))
	tb.eventually(t, 15*time.Second, `performance.getEntriesByType("resource").some(e => e.initiatorType === "fetch" && e.startTime >= window.dlqSince)`,
		"refreshes once the field is back to its default")
	tb.quiet(t)
}

// TestBrowserGroupsAutoRefresh: with auto-refresh turned on, the failure
// groups list and a group's page show a new dead letter's count without
// a reload, as the overview does.
func TestBrowserGroupsAutoRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(2, "orders")...)
	list, group := newTab(t, b), newTab(t, b)
	list.signIn(t, tokViewer)
	group.signIn(t, tokOp)
	list.open(t, "/ui/groups?source_queue=orders")
	const pending = `[data-test="group-row"] td[data-label="Pending"]`
	require.Equal(t, []string{"2"}, list.texts(t, pending))
	href := list.attrs(t, `[data-test="group-row"] th a`, "href")
	require.Len(t, href, 1)
	group.open(t, href[0])
	require.Equal(t, []string{"2"}, group.texts(t, `[data-test="group-header"] [data-test="pending-count"]`))
	for _, tb := range []*tab{list, group} {
		require.Equal(t, "Resume auto-refresh", tb.texts(t, `[data-test="auto-refresh"]`)[0], "off by default")
		tb.do(t, click(`[data-test="auto-refresh"]`),
			chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); window.dlqMark = 1`))
		require.Equal(t, "Pause auto-refresh", tb.texts(t, `[data-test="auto-refresh"]`)[0])
	}

	b.seed(t, many(3, "orders")...)
	list.eventually(t, 15*time.Second, `document.querySelector('`+pending+`').textContent.trim() === "5"`,
		"the list shows the new dead letters")
	group.eventually(t, 15*time.Second, `document.querySelector('[data-test="group-header"] [data-test="pending-count"]').textContent.trim() === "5"`,
		"the group's page shows the new dead letters")
	for _, tb := range []*tab{list, group} {
		require.True(t, get(t, tb, chromedp.Evaluate[bool](`window.dlqMark === 1`)), "no reload")
		tb.quiet(t)
	}
}

// TestBrowserRefreshWaitsForThePointer: while the pointer rests on a
// control of a refreshed part (Approve, here), nothing is refreshed: a new
// request listed above would move another request's Approve under it
// between aiming and clicking. Moved away, the page refreshes again.
func TestBrowserRefreshWaitsForThePointer(t *testing.T) {
	t.Parallel()
	tb, _ := approvalsWithOneRequest(t)
	xy := get(t, tb, chromedp.Evaluate[[]float64](`(() => {
		const r = document.querySelector('[data-test="approve"]').getBoundingClientRect();
		return [r.left + r.width / 2, r.top + r.height / 2];
	})()`))
	tb.do(t, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, xy[0], xy[1]), chromedp.Evaluate[chromedp.Void](markFetches))
	tb.eventually(t, 15*time.Second, `document.querySelector('[data-test="updated-ago"]').textContent.includes("paused while the pointer is on a control")`,
		"the refresh waits while the pointer is on Approve")
	tb.eventually(t, 30*time.Second, `(() => {
		const m = /Updated (\d+) s ago/.exec(document.querySelector('[data-test="updated-ago"]').textContent);
		return m !== null && Number(m[1]) >= 11;
	})()`, "two periods pass")
	require.False(t, get(t, tb, chromedp.Evaluate[bool](`performance.getEntriesByType("resource").some(e => e.initiatorType === "fetch" && e.startTime >= window.dlqSince)`)),
		"nothing was fetched while the pointer rested there")

	tb.do(t, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 1, 1))
	tb.eventually(t, 15*time.Second, `performance.getEntriesByType("resource").some(e => e.initiatorType === "fetch" && e.startTime >= window.dlqSince)`,
		"refreshes once the pointer moved away")
	tb.quiet(t)
}
