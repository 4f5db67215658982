package console_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// ids reads the data-id of every message row on the page.
func (tb *tab) rowIDs(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	for _, s := range tb.attrs(t, `[data-test="message-row"]`, "data-id") {
		id, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		out = append(out, id)
	}
	return out
}

// TestBrowserFilterAndPage: the filter form narrows the listing; keyset
// pages walk every message once, newest first; counts come from the
// summary.
func TestBrowserFilterAndPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orders := b.seed(t, many(60, "orders")...)
	billing := b.seed(t, many(5, "billing")...)
	tb := newTab(t, b)
	tb.signIn(t, tokViewer)

	tb.open(t, "/ui/messages")
	require.Contains(t, tb.texts(t, `#count`)[0], "65 matching")
	tb.do(t, chromedp.SendKeys(chromedp.CSS(`input[name="source_queue"]`), "billing"))
	tb.submit(t, `form.filters button[type="submit"]`)
	require.ElementsMatch(t, billing, tb.rowIDs(t))
	require.Contains(t, tb.texts(t, `#count`)[0], "5 matching")
	require.Zero(t, tb.count(t, `[data-test="next-page"]`))

	tb.open(t, "/ui/messages?source_queue=orders")
	require.Contains(t, tb.texts(t, `#count`)[0], "60 matching", "the summary answers a queue's count")
	first := tb.rowIDs(t)
	require.Len(t, first, 50)
	require.True(t, slices.IsSortedFunc(first, func(a, b int64) int { return int(b - a) }), "newest first")
	tb.submit(t, `[data-test="next-page"]`)
	second := tb.rowIDs(t)
	require.Len(t, second, 10)
	require.Less(t, second[0], first[len(first)-1])
	require.ElementsMatch(t, orders, append(first, second...), "every message once")
	require.Zero(t, tb.count(t, `[data-test="next-page"]`))

	tb.open(t, "/ui/messages?q=declined+by+issuer&source_queue=orders")
	require.Contains(t, tb.texts(t, `#count`)[0], "More than 50", "a search is not counted")
	tb.quiet(t)
}

// TestBrowserReplaySelected: select three messages and replay them: those
// three arrive at their source queue, checked on RabbitMQ.
func TestBrowserReplaySelected(t *testing.T) {
	t.Parallel()
	q, app := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	ids := b.seed(t, many(5, q)...)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages?source_queue="+q)
	chosen := []int64{ids[0], ids[2], ids[4]}
	for _, id := range chosen {
		tb.do(t, click(`[data-test="message-row"][data-id="`+strconv.FormatInt(id, 10)+`"] [data-test="select"]`))
	}
	// At most one copy: the option travels through the confirmation to the task.
	tb.do(t, chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-test="on-unknown"]').value = "hold"`))
	tb.submit(t, `[data-test="bulk-replay"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Replay 3 messages?")
	require.Equal(t, int64(http.StatusOK), tb.submit(t, `[data-test="confirm"]`), "back on the messages page")
	require.Contains(t, tb.flash(t), "started")
	require.Equal(t, 1, tb.count(t, `[data-test="flash"] a[href^="/ui/replays/"]`), "the task is a link")
	tb.submit(t, `[data-test="flash"] a[href^="/ui/replays/"]`)
	require.Equal(t, []string{"hold it as unknown (at most one copy)"}, tb.texts(t, `[data-test="replay-on-unknown"]`))

	var arrived []int64
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		arrived = append(arrived, arrivedIDs(t, app, q)...)
		return len(arrived) >= 3
	}, "3 messages back on %s", q)
	require.ElementsMatch(t, chosen, arrived)
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		st := b.statuses(t, ids)
		return st[ids[0]] == store.StatusReplayed && st[ids[2]] == store.StatusReplayed && st[ids[4]] == store.StatusReplayed
	}, "the three are replayed")
	st := b.statuses(t, ids)
	require.Equal(t, store.StatusPending, st[ids[1]])
	require.Equal(t, store.StatusPending, st[ids[3]])
	tb.quiet(t)
}

// TestBrowserGroupReplayProgressCancel: a failure group replayed at a rate
// shows its progress live (polled, no page reload), then is cancelled.
func TestBrowserGroupReplayProgressCancel(t *testing.T) {
	t.Parallel()
	q, app := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	b.seed(t, many(40, q)...)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/groups?source_queue="+q)
	require.Equal(t, 1, tb.count(t, `[data-test="group-row"]`))
	tb.do(t, chromedp.SetValue(chromedp.CSS(`[data-test="group-row"] input[name="rate"]`), "4"),
		chromedp.SetValue(chromedp.CSS(`[data-test="group-row"] input[name="limit"]`), "30"))
	tb.submit(t, `[data-test="group-replay"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Replay 30 messages?", "a partial replay: 30 of 40")
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "started")
	tb.submit(t, `[data-test="flash"] a[href^="/ui/replays/"]`)
	require.Equal(t, 1, tb.count(t, `[data-test="replay-detail"]`))

	// A mark on the page survives the updates: they are swapped in, the
	// page is not reloaded.
	tb.do(t, chromedp.Evaluate[chromedp.Void](`window.dlqMark = 1`))
	tb.eventually(t, 20*time.Second, `Number(document.querySelector('[data-test="progress"]').value) >= 2`, "the progress bar moves")
	require.True(t, get(t, tb, chromedp.Evaluate[bool](`window.dlqMark === 1`)), "no full page reload")
	tb.submit(t, `[data-test="cancel"]`)
	require.Contains(t, tb.flash(t), "cancel")
	tb.eventually(t, 10*time.Second, `document.querySelector('[data-test="replay-status"]').textContent.trim() === "cancelled"`, "the task is cancelled")

	// The status reads cancelled at once; the runner lets the task go only
	// once the publishes in flight have their outcomes. From then on it
	// sends nothing, and what it counted as published is in the queue.
	path := get(t, tb, chromedp.Evaluate[string](`location.pathname`))
	id, err := strconv.ParseInt(strings.TrimPrefix(path, "/ui/replays/"), 10, 64)
	require.NoError(t, err, "the replay's page is %s", path)
	var task store.ReplayTask
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		task, err = b.st.GetReplayTask(context.Background(), id)
		require.NoError(t, err)
		return task.RunnerOwner == ""
	}, "the runner of cancelled task %d never let it go", id)
	n := len(arrivedIDs(t, app, q))
	require.Positive(t, n)
	require.Less(t, n, 30, "cancelled before the end")
	require.EqualValues(t, task.Published, n, "what arrived is what the task counts as published (%+v)", task)
	tb.quiet(t)
}

// TestBrowserAcknowledgeAndDelete: acknowledge a message; delete another
// behind a confirmation that states the count (nothing is deleted until
// it is accepted).
func TestBrowserAcknowledgeAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(2, "orders")...)
	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)

	tb.open(t, "/ui/messages/"+strconv.FormatInt(ids[0], 10))
	tb.submit(t, `[data-test="action-ack"]`)
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "Acknowledged 1 message")
	require.Equal(t, store.StatusAcknowledged, b.statuses(t, ids)[ids[0]])

	tb.open(t, "/ui/messages/"+strconv.FormatInt(ids[1], 10))
	tb.submit(t, `[data-test="action-delete"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Delete 1 message?")
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`[data-test="confirm"]`))), "Delete 1")
	require.Equal(t, store.StatusPending, b.statuses(t, ids)[ids[1]], "not before the confirmation")
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "Deleted 1 message")
	require.Equal(t, "gone", b.statuses(t, ids)[ids[1]])
	tb.quiet(t)
}

// TestBrowserAllMatchingSnapshot: "all N matching" acts on the messages the
// confirmation counted; those that arrive after it are left alone.
func TestBrowserAllMatchingSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(3, "billing")...)
	before := b.seed(t, many(5, "orders")...)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages?source_queue=orders")
	tb.do(t, click(`[data-test="select-all-matching"]`))
	tb.submit(t, `[data-test="bulk-ack"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Acknowledge 5 messages?")

	later := b.seed(t, many(3, "orders")...)
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "Acknowledged 5 messages")
	for id, s := range b.statuses(t, before) {
		require.Equal(t, store.StatusAcknowledged, s, "message %d", id)
	}
	for id, s := range b.statuses(t, later) {
		require.Equal(t, store.StatusPending, s, "message %d arrived after the confirmation", id)
	}
	tb.quiet(t)
}

// TestBrowserViewer: a viewer's pages have no action control, and a
// POST it forges from the page (with its own valid CSRF token) is
// refused.
func TestBrowserViewer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(2, "orders")...)
	tb := newTab(t, b)
	tb.signIn(t, tokViewer)
	controls := `[data-test="select"], [data-test="select-all-matching"], [data-test="bulk-replay"], [data-test="bulk-ack"], ` +
		`[data-test="bulk-delete"], [data-test="action-replay"], [data-test="action-ack"], [data-test="action-delete"], [data-test="cancel"], form[action="/ui/confirm"]`
	for _, p := range []string{"/ui/", "/ui/messages", "/ui/messages/" + strconv.FormatInt(ids[0], 10), "/ui/groups", "/ui/replays"} {
		tb.open(t, p)
		require.Zero(t, tb.count(t, controls), "%s shows an action control to a viewer", p)
	}
	require.Zero(t, tb.count(t, `a[href="/ui/audit"]`), "no audit link")
	// Forge the acknowledge form the page does not show.
	tb.do(t, chromedp.Evaluate[chromedp.Void](`(() => {
		const f = document.createElement("form"); f.method = "post"; f.action = "/ui/act"; f.id = "forged";
		for (const [k, v] of [["action", "acknowledge"], ["id", "`+strconv.FormatInt(ids[0], 10)+`"],
			["csrf", document.querySelector('input[name="csrf"]').value]]) {
			const i = document.createElement("input"); i.type = "hidden"; i.name = k; i.value = v; f.appendChild(i);
		}
		const s = document.createElement("button"); s.type = "submit"; s.id = "forged-submit"; f.appendChild(s);
		document.body.appendChild(f);
	})()`))
	require.Equal(t, int64(http.StatusForbidden), tb.submit(t, `#forged-submit`))
	require.Contains(t, tb.flash(t), "Refused")
	require.Equal(t, store.StatusPending, b.statuses(t, ids)[ids[0]])
}

// TestBrowserScopedToken: a token scoped to one queue sees no other queue
// anywhere: overview, listings (every status, search), groups, messages by
// id, and a filter naming another queue is refused.
func TestBrowserScopedToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(3, scopedQueue)...)
	billing := b.seed(t, msg{queue: "billing", failureType: "PaymentDeclined", failureMessage: "declined by issuer", body: []byte(`{"secret":"billing"}`)})
	tb := newTab(t, b)
	tb.signIn(t, tokScoped)
	for _, p := range []string{"/ui/", "/ui/messages", "/ui/messages?status=all", "/ui/messages?q=declined+by+issuer",
		"/ui/groups", "/ui/groups?status=all", "/ui/replays", "/ui/jobs"} {
		tb.open(t, p)
		text := get(t, tb, chromedp.Evaluate[string](`document.body.innerText`))
		require.NotContains(t, text, "billing", p)
		if strings.HasPrefix(p, "/ui/messages") {
			require.Len(t, tb.rowIDs(t), 3, p)
		}
	}
	tb.open(t, "/ui/")
	require.Equal(t, []string{scopedQueue}, tb.attrs(t, `[data-test="queue-row"]`, "data-queue"))

	tb.do(t, chromedp.Navigate(b.srv.URL+"/ui/messages/"+strconv.FormatInt(billing[0], 10)))
	require.Contains(t, tb.flash(t), "Not found")
	tb.do(t, chromedp.Navigate(b.srv.URL+"/ui/messages?source_queue=billing"))
	require.Contains(t, tb.flash(t), "Refused")
	require.Empty(t, tb.rowIDs(t))
}

// TestBrowserCSRF: a form whose CSRF token is missing or wrong is refused
// and changes nothing.
func TestBrowserCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(1, "orders")...)
	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	for _, tamper := range []string{
		`document.querySelector('section.actions input[name="csrf"]').value = "wrong"`,
		`document.querySelector('section.actions input[name="csrf"]').remove()`,
	} {
		tb.open(t, "/ui/messages/"+strconv.FormatInt(ids[0], 10))
		tb.do(t, chromedp.Evaluate[chromedp.Void](tamper))
		require.Equal(t, int64(http.StatusForbidden), tb.submit(t, `[data-test="action-ack"]`), tamper)
		require.Contains(t, tb.flash(t), "security token")
	}
	require.Equal(t, store.StatusPending, b.statuses(t, ids)[ids[0]])
}
