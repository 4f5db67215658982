package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// markFetches is JavaScript that starts a new count of fetches: those the
// page starts from now on (fetches counts them). Clearing the browser's
// resource timings instead would still count a request started just
// before (when the user let go of a field, say) that ended after.
const markFetches = `window.dlqSince = performance.now()`

// fetches is how many requests the page's script started since the last
// markFetches (the auto-refresh), and the largest of them, in bytes on the
// wire.
func (tb *tab) fetches(t *testing.T) (n int, largest int) {
	t.Helper()
	r := get(t, tb, chromedp.Evaluate[[]int](`(() => {
		const f = performance.getEntriesByType("resource").filter(e => e.initiatorType === "fetch" && e.startTime >= (window.dlqSince || 0));
		return [f.length, f.reduce((m, e) => Math.max(m, e.transferSize || e.encodedBodySize || 0), 0)];
	})()`))
	return r[0], r[1]
}

// pendingOf reads the overview's pending count of queue.
func (tb *tab) pendingOf(t *testing.T, queue string) string {
	t.Helper()
	return strings.Join(tb.texts(t, `[data-test="queue-row"][data-queue="`+queue+`"] [data-test="pending-count"]`), "")
}

// TestBrowserAutoRefresh: the overview left open shows new dead letters
// within 10 seconds, without a reload (a mark set on the window
// survives); it asks at most one small request per 5 seconds; paused, it
// asks nothing. Meanwhile, in a second tab, a listing whose auto-refresh
// was turned on refreshes nothing while a field has focus or rows are
// selected, and refreshes again once the user lets go. (Two tabs at once:
// the waits overlap.)
func TestBrowserAutoRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(2, "orders")...)
	overview, listing := newTab(t, b), newTab(t, b)
	overview.signIn(t, tokViewer)
	listing.signIn(t, tokOp)
	overview.open(t, "/ui/")
	require.Equal(t, "2", overview.pendingOf(t, "orders"))
	require.Equal(t, "Pause auto-refresh", overview.texts(t, `[data-test="auto-refresh"]`)[0], "on by default")
	listing.open(t, "/ui/messages?source_queue=orders")
	require.Equal(t, "Resume auto-refresh", listing.texts(t, `[data-test="auto-refresh"]`)[0], "off by default on a listing")
	listing.do(t, click(`[data-test="auto-refresh"]`),
		chromedp.Focus(chromedp.CSS(`input[name="q"]`)), chromedp.Evaluate[chromedp.Void](markFetches))
	focused := time.Now()

	overview.do(t, chromedp.Evaluate[chromedp.Void](`window.dlqMark = 1; `+markFetches))
	start := time.Now()
	b.seed(t, many(3, "orders")...)
	overview.eventually(t, 10*time.Second, `document.querySelector('[data-test="queue-row"][data-queue="orders"] [data-test="pending-count"]').textContent.trim() === "5"`,
		"the new dead letters show within 10 s")
	require.True(t, get(t, overview, chromedp.Evaluate[bool](`window.dlqMark === 1`)), "no reload")
	require.Contains(t, overview.texts(t, `[data-test="updated-ago"]`)[0], "Updated")

	// The listing, its field focused for 6 s (past one period): nothing.
	time.Sleep(time.Until(focused.Add(6 * time.Second)))
	n, _ := listing.fetches(t)
	require.Zero(t, n, "nothing while a field has focus")
	require.Contains(t, listing.texts(t, `[data-test="updated-ago"]`)[0], "paused while a field has focus")
	// Straight from the field to a row's box, as a user's click goes: the
	// focus passes from one to the other, so no refresh can swap the rows
	// between finding the box and clicking it. (A blur first let one in,
	// and the click found its node gone.)
	listing.do(t, click(`[data-test="message-row"] [data-test="select"]`),
		chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); `+markFetches))
	selected := time.Now()

	// The overview over about 15 seconds: at most one request per 5 s,
	// each small.
	time.Sleep(time.Until(start.Add(15 * time.Second)))
	n, largest := overview.fetches(t)
	require.LessOrEqual(t, n, 3, "at most one request per 5 s over %s", time.Since(start))
	require.GreaterOrEqual(t, n, 2, "it kept refreshing")
	require.Less(t, largest, 8<<10, "a small request: the page's content, gzipped")
	overview.do(t, click(`[data-test="auto-refresh"]`))
	require.Equal(t, "Resume auto-refresh", overview.texts(t, `[data-test="auto-refresh"]`)[0])
	overview.do(t, chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); `+markFetches))
	paused := time.Now()

	// The listing, a row selected for 6 s: nothing, and the row stays
	// selected; let go, it refreshes.
	time.Sleep(time.Until(selected.Add(6 * time.Second)))
	n, _ = listing.fetches(t)
	require.Zero(t, n, "nothing while rows are selected")
	require.Equal(t, "1 selected", listing.texts(t, `[data-test="selected-count"]`)[0])
	require.Equal(t, 1, listing.count(t, `[data-test="select"]:checked`), "the selection is kept")
	listing.do(t, click(`[data-test="message-row"] [data-test="select"]`),
		chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`))
	listing.eventually(t, 8*time.Second, `performance.getEntriesByType("resource").some(e => e.initiatorType === "fetch" && e.startTime >= window.dlqSince)`, "refreshes once let go")

	// The overview, paused for 6 s: nothing more was asked.
	time.Sleep(time.Until(paused.Add(6 * time.Second)))
	n, _ = overview.fetches(t)
	require.Zero(t, n, "paused")
	overview.quiet(t)
	listing.quiet(t)
}

// TestBrowserOverviewSortAndAlerts: queues with a firing alert come first,
// then by pending messages; a firing alert links to its queue and to its
// rule's runbook.
func TestBrowserOverviewSortAndAlerts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, append(append(many(1, "audit"), many(5, "billing")...), many(3, "orders")...)...)
	const runbook = "https://wiki.example/oncall/audit#backlog"
	rule := alerts.Rule{Name: "audit_backlog", Kind: alerts.KindPendingCount, Threshold: 0, RunbookURL: runbook}
	rs := alerts.RuleSet{Rules: []alerts.Rule{rule}}
	require.NoError(t, rs.Validate())
	state, _ := alerts.Evaluate(alerts.State{}, alerts.Snapshot{At: time.Now(), Queues: []alerts.QueueStats{{SourceQueue: "audit", Pending: 1}}}, rs)
	raw, err := json.Marshal(state)
	require.NoError(t, err)
	require.NoError(t, b.st.SaveAlertState(context.Background(), dlqtest.Lease(t, b.st, "alerts"), raw))

	tb := newTab(t, b)
	tb.signIn(t, tokViewer)
	tb.open(t, "/ui/")
	require.Equal(t, []string{"audit", "billing", "orders"}, tb.attrs(t, `[data-test="queue-row"]`, "data-queue"),
		"the firing queue first, then by pending")
	require.Equal(t, []string{"audit"}, tb.attrs(t, `[data-test="alert-row"]`, "data-queue"))
	require.Equal(t, []string{"/ui/messages?source_queue=audit"}, tb.attrs(t, `[data-test="alert-row"] a[data-test="alert-queue"]`, "href"))
	require.Equal(t, []string{runbook}, tb.attrs(t, `[data-test="alert-row"] a[data-test="alert-runbook"]`, "href"))
	tb.quiet(t)
}

// TestBrowserGroupPage: a failure group has its page, linked from the
// groups list and the overview: what failed and where, its category,
// counts by status, first and last seen, its last replay, "failed again"
// once messages of the group died after it, and its actions. The
// messages it links to name the group in their heading.
func TestBrowserGroupPage(t *testing.T) {
	t.Parallel()
	q, app := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	b.seed(t, many(3, q)...)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/groups?source_queue="+q)
	href := tb.attrs(t, `[data-test="group-row"] th a`, "href")
	require.Len(t, href, 1)
	require.True(t, strings.HasPrefix(href[0], "/ui/groups/"), "the group's link is its page: %s", href[0])
	require.Len(t, tb.texts(t, `[data-test="group-row"] [data-test="category"]`), 1, "the category is shown")
	tb.submit(t, `[data-test="group-row"] th a`)
	require.Equal(t, 1, tb.count(t, `[data-test="group-header"]`))
	require.Contains(t, tb.texts(t, `main h1`)[0], "PaymentDeclined")
	require.Equal(t, "3", tb.texts(t, `[data-test="group-header"] [data-test="pending-count"]`)[0])
	require.Contains(t, strings.Join(tb.texts(t, `main`), " "), "This group was not replayed")

	tb.submit(t, `[data-test="group-replay"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Replay 3 messages?")
	tb.submit(t, `[data-test="confirm"]`)
	var arrived []int64
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		arrived = append(arrived, arrivedIDs(t, app, q)...)
		return len(arrived) >= 3
	}, "the group's 3 messages back on %s", q)
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, b.db.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages WHERE status = 'replayed'`).Scan(&n))
		return n == 3
	}, "the three are replayed")
	tb.open(t, href[0])
	require.Equal(t, 1, tb.count(t, `[data-test="group-last-replay"] a[href^="/ui/replays/"]`), "its last replay, linked")
	require.Zero(t, tb.count(t, `[data-test="failed-again"]`))

	b.seed(t, many(1, q)...) // the same failure, after the replay
	tb.open(t, href[0])
	require.Equal(t, 1, tb.count(t, `[data-test="failed-again"]`), "last replayed, failed again")
	require.Equal(t, "1", tb.texts(t, `[data-test="group-header"] [data-test="pending-count"]`)[0])

	tb.submit(t, `[data-test="group-header"] [data-test="pending-count"]`)
	require.Equal(t, "Messages of a failure group", tb.texts(t, `main h1`)[0])
	require.Contains(t, tb.texts(t, `.group-name`)[0], "PaymentDeclined")
	require.Equal(t, 1, tb.count(t, `[data-test="message-row"]`))

	tb.open(t, "/ui/")
	require.Equal(t, []string{href[0]}, tb.attrs(t, `#groups-h ~ table a[href^="/ui/groups/"]`, "href"), "the overview links to the page")
	tb.quiet(t)
}

// TestBrowserSearchFindsReplayed: a search for what a replayed message's
// body says finds it in the console, with where it matched, and says that
// the search covers every status; the API's listing keeps its default
// (pending only) and does not list it.
func TestBrowserSearchFindsReplayed(t *testing.T) {
	t.Parallel()
	q, app := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	ids := b.seed(t, msg{queue: q, failureType: "OrderRejected", failureMessage: "rejected by rule", body: []byte(`{"order":"ORD-77331","total":12}`)})
	b.seed(t, many(2, q)...)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages/"+strconv.FormatInt(ids[0], 10))
	tb.submit(t, `[data-test="action-replay"]`)
	tb.submit(t, `[data-test="confirm"]`)
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		return len(arrivedIDs(t, app, q)) > 0 || b.statuses(t, ids)[ids[0]] == store.StatusReplayed
	},
		"the message is replayed")
	dlqtest.Eventually(t, 10*time.Second, func() bool { return b.statuses(t, ids)[ids[0]] == store.StatusReplayed }, "replayed")

	tb.open(t, "/ui/messages?q=ORD-77331")
	require.Equal(t, []int64{ids[0]}, tb.rowIDs(t), "found, though replayed")
	require.Contains(t, tb.texts(t, `[data-test="snippet"]`)[0], "in body:")
	require.Equal(t, "ORD-77331", tb.texts(t, `[data-test="snippet"] mark`)[0])
	require.Contains(t, tb.texts(t, `[data-test="all-statuses"]`)[0], "1 message on this page is already replayed or acknowledged")
	require.Contains(t, tb.texts(t, `#count`)[0], "1 matching message.", "one message, singular")

	req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/api/v1/messages?q=ORD-77331", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokOp)
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var page struct {
		Messages []struct{ ID int64 } `json:"messages"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.Empty(t, page.Messages, "the API lists pending messages by default")

	tb.open(t, "/ui/messages?q=ORD-77331&status=pending")
	require.Empty(t, tb.rowIDs(t), "a status chosen narrows it")
	require.Zero(t, tb.count(t, `[data-test="all-statuses"]`))
	tb.quiet(t)
}

// TestBrowserLargeJSONBody: a JSON body of 1.9 MiB shows its beginning
// formatted, cut within the page's limit.
func TestBrowserLargeJSONBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var body strings.Builder
	body.WriteString(`{"lines":[`)
	for i := 0; body.Len() < 1900<<10; i++ {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"sku":"SKU-` + strconv.Itoa(i) + `","qty":` + strconv.Itoa(i%7) + `}`)
	}
	body.WriteString(`]}`)
	ids := b.seed(t, msg{queue: "orders", failureType: "TooLarge", failureMessage: "payload", body: []byte(body.String())})
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages/"+strconv.FormatInt(ids[0], 10))
	shown := tb.texts(t, `[data-test="body"]`)[0]
	require.True(t, strings.HasPrefix(shown, "{\n  \"lines\": [\n    {\n      \"sku\": \"SKU-0\",\n      \"qty\": 0\n    },"), shown[:min(len(shown), 200)])
	require.Greater(t, strings.Count(shown, "\n"), 500, "formatted, line by line")
	require.Contains(t, strings.Join(strings.Fields(strings.Join(tb.texts(t, `#body-h ~ p`), " ")), " "), "JSON, formatted; 1.9 MiB, the first")
	tb.quiet(t)
}
