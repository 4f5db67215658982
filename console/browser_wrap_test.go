package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// How the console's tables lay out words: short tokens (ids, statuses,
// numbers, times, column names) whole at any width, long values wrapped,
// wide tables as cards under 900 px; the auto-refresh control beside the
// flash; ages and rates in words.

// shortTokens are the elements whose text is short tokens, never to be cut
// inside a word.
const shortTokens = `.status, .category, td.id, td.token, td.n, th.n, thead th, time, .ago`

// brokenMidWord lists the text of each visible element matching sel that a
// line break cuts between two non-blank characters ("1/8", "pendin/g").
// It compares the line of each character with the one before it.
func (tb *tab) brokenMidWord(t *testing.T, sel string) []string {
	t.Helper()
	return get(t, tb, chromedp.Evaluate[[]string](`(() => {
		const out = [];
		for (const el of document.querySelectorAll(`+strconv.Quote(sel)+`)) {
			if (!el.getClientRects().length) { continue; }
			// Column names a reflowed table keeps for screen readers only.
			const unseen = el.closest(".sr-only, table.reflow thead");
			if (unseen && getComputedStyle(unseen).position === "absolute") { continue; }
			const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT | NodeFilter.SHOW_ELEMENT);
			let prev = null, cut = false;
			for (let n = walk.nextNode(); n && !cut; n = walk.nextNode()) {
				if (n.nodeType === Node.ELEMENT_NODE) { if (n.tagName === "BR") { prev = null; } continue; }
				const s = n.textContent;
				for (let i = 0; i < s.length; i++) {
					if (/\s/.test(s[i])) { prev = null; continue; }
					const r = document.createRange();
					r.setStart(n, i); r.setEnd(n, i + 1);
					const box = r.getBoundingClientRect();
					if (!box.height) { continue; }
					if (prev && box.top - prev.top > prev.height / 2) { cut = true; break; }
					prev = box;
				}
			}
			if (cut) { out.push(el.textContent.trim().replace(/\s+/g, " ")); }
		}
		return out;
	})()`))
}

// sideways is how much wider than the window the document is (0: no
// horizontal page scroll).
func (tb *tab) sideways(t *testing.T) int {
	t.Helper()
	return get(t, tb, chromedp.Evaluate[int](`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
}

// seedCrowded fills a console with what squeezes a table's columns: long
// queue names and failure texts, every status, audit rows with request
// ids, replays and an approval request waiting. It returns the ids it
// stored.
func seedCrowded(t *testing.T, b *bundle) []int64 {
	t.Helper()
	long := "payments.settlement.eu-west-1.retry-queue-with-a-rather-long-name"
	text := strings.Repeat("The invoice INV-2024-000123 could not be mapped because the customer reference was missing and ", 3)
	var msgs []msg
	for i, typ := range []string{"System.InvalidOperationException", "Npgsql.PostgresException", "KeyError", "PaymentDeclined"} {
		for range 6 {
			msgs = append(msgs, msg{queue: []string{long, "orders"}[i%2], failureType: typ, failureMessage: typ + ": " + text,
				headers: `{"x-trace-id":"` + strings.Repeat("a1b2c3d4e5f6", 12) + `","x-exception-message":"mapping failed"}`})
		}
	}
	ids := b.seed(t, msgs...)
	// Acknowledged and deleted through the console: audit rows with the
	// request's id.
	c := b.signIn(t, tokAdmin)
	for _, f := range []url.Values{{"action": {"acknowledge"}, "id": {idString(ids[0]), idString(ids[1]), idString(ids[2])}},
		{"action": {"delete"}, "id": {idString(ids[3])}}} {
		f.Set("back", "/ui/messages")
		r := c.act(t, "/ui/act", f)
		require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	}
	ctx := context.Background()
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	for _, req := range []replay.Request{{IDs: ids[4:6]}, {IDs: ids[6:8], RatePerSecond: 1, DelaySeconds: 600}} {
		_, err := b.ops.StartReplay(ctx, admin, ops.ReplayRequest{Request: req, Confirm: true})
		require.NoError(t, err)
	}
	_, err := b.ops.Acknowledge(ctx, ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole},
		ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Confirm: true})
	var pa *ops.PendingApproval
	require.True(t, errors.As(err, &pa), "an approval request to show: %v", err)
	return ids
}

// TestBrowserShortTokensStayWhole: at 1000, 1280 and 1600 px, no id,
// status, category, number, time or column name is cut inside a word on
// the messages, failure groups, audit and overview pages, crowded with long
// queue names and failure texts, and none scrolls sideways; at 800 px
// neither does any, and a message's header names and types are whole.
func TestBrowserShortTokensStayWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 3 })
	ids := seedCrowded(t, b)
	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	pages := []string{"/ui/messages?status=all", "/ui/groups", "/ui/audit", "/ui/"}
	for _, width := range []int64{1000, 1280, 1600} {
		tb.do(t, chromedp.EmulateViewport(width, 900))
		for _, path := range pages {
			tb.open(t, path)
			require.Positive(t, tb.count(t, `td.id, td.n, td.token`), "%s has ids or numbers to look at", path)
			require.Empty(t, tb.brokenMidWord(t, shortTokens), "%s at %d px cuts these inside a word", path, width)
			require.Zero(t, tb.sideways(t), "%s at %d px scrolls sideways", path, width)
		}
	}
	require.Positive(t, tb.count(t, `.status`), "the overview shows statuses")
	tb.do(t, chromedp.EmulateViewport(800, 900))
	for _, path := range pages {
		tb.open(t, path)
		require.Zero(t, tb.sideways(t), "%s at 800 px scrolls sideways", path)
	}
	tb.open(t, "/ui/messages/"+idString(ids[len(ids)-1]))
	require.Positive(t, tb.count(t, `[data-test="header-row"]`))
	require.Empty(t, tb.brokenMidWord(t, `[data-test="header-row"] th, [data-test="header-row"] td:not(.pre), `+shortTokens),
		"a message's headers at 800 px")
	require.Zero(t, tb.sideways(t), "a message at 800 px scrolls sideways")
	tb.quiet(t)
}

// TestBrowserReplaysApprovalsAuditReflow: under 900 px the replays,
// approvals and audit tables become one card per row, each cell labelled
// with its column, statuses whole, and the page does not scroll sideways.
func TestBrowserReplaysApprovalsAuditReflow(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 3 })
	seedCrowded(t, b)
	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	tb.do(t, chromedp.EmulateViewport(800, 900))
	for path, row := range map[string]string{"/ui/replays": "replay-row", "/ui/approvals": "approval-row", "/ui/audit": "audit-row"} {
		tb.open(t, path)
		rows := `[data-test="` + row + `"]`
		require.Positive(t, tb.count(t, rows), path)
		cards := get(t, tb, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+strconv.Quote(rows)+`)).map(r => getComputedStyle(r).display)`))
		for _, d := range cards {
			require.Equal(t, "block", d, "%s: each row is a card", path)
		}
		labels := get(t, tb, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+strconv.Quote(rows+` td[data-label]`)+`)).map(c => getComputedStyle(c, "::before").content)`))
		require.NotEmpty(t, labels, "%s: its cells carry their column's name", path)
		for _, l := range labels {
			require.NotEqual(t, "none", l, "%s: each labelled cell shows its label", path)
		}
		require.Empty(t, tb.brokenMidWord(t, rows+` .status, `+shortTokens), "%s at 800 px cuts these inside a word", path)
		require.Zero(t, tb.sideways(t), "%s at 800 px scrolls sideways", path)
	}
	tb.quiet(t)
}

// TestBrowserOverviewGroupWithoutFailure: a failure group whose messages
// carry no failure headers has a visible link to its page among the
// overview's largest groups, in the words the failure groups page uses.
func TestBrowserOverviewGroupWithoutFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, msg{queue: "bare"}, msg{queue: "bare"})
	groups, err := b.ops.Groups(context.Background(), ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole},
		store.GroupQuery{SourceQueue: "bare"})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Empty(t, groups[0].FailureType)
	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	tb.open(t, "/ui/")
	link := `section[aria-labelledby="groups-h"] a[href="/ui/groups/` + groups[0].ID + `"]`
	require.Equal(t, []string{"(no failure type)"}, tb.texts(t, link))
	size := get(t, tb, chromedp.Evaluate[[]float64](`(() => { const r = document.querySelector(`+strconv.Quote(link)+`).getBoundingClientRect(); return [r.width, r.height]; })()`))
	require.Greater(t, size[0], 20.0, "the link is wide enough to see and click")
	require.Greater(t, size[1], 5.0)
	tb.open(t, "/ui/groups")
	require.Contains(t, tb.texts(t, `a[href="/ui/groups/`+groups[0].ID+`"]`), "(no failure type)", "the same words as the failure groups page")
	tb.quiet(t)
}

// TestBrowserLiveControlBesideFlash: the auto-refresh control sits above
// the flash, not over its border, and shows all of its text, at 1280 and
// 800 px.
func TestBrowserLiveControlBesideFlash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(3, "orders")...)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages?source_queue=orders")
	tb.do(t, click(`[data-test="message-row"][data-id="`+idString(ids[1])+`"] [data-test="select"]`))
	tb.submit(t, `[data-test="bulk-ack"]`)
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "Acknowledged 1 message")
	tb.eventually(t, 10*time.Second, `document.querySelector('[data-test="updated-ago"]').textContent.includes("auto-refresh off")`,
		"the messages page says its auto-refresh is off")
	for _, width := range []int64{1280, 800} {
		tb.do(t, chromedp.EmulateViewport(width, 900))
		box := get(t, tb, chromedp.Evaluate[[]float64](`(() => {
			const live = document.querySelector(".live").getBoundingClientRect(), flash = document.querySelector('[data-test="flash"]').getBoundingClientRect();
			const overlap = Math.max(0, Math.min(live.right, flash.right) - Math.max(live.left, flash.left)) *
				Math.max(0, Math.min(live.bottom, flash.bottom) - Math.max(live.top, flash.top));
			return [overlap, live.bottom, flash.top];
		})()`))
		require.Zero(t, box[0], "at %d px the auto-refresh control overlaps the flash", width)
		require.LessOrEqual(t, box[1], box[2], "at %d px the control is above the flash", width)
		clipped := get(t, tb, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.live, .live > *')).
			filter(e => e.scrollWidth > e.clientWidth || e.scrollHeight > e.clientHeight).map(e => e.className || e.getAttribute("data-test"))`))
		require.Empty(t, clipped, "at %d px these parts of the control clip their text", width)
	}
	tb.quiet(t)
}

// oldestRe is the overview's oldest pending message's cell: the time it
// died, with how long ago beside it as every time of the console reads
// ("(5 s ago)", whenHTML), not an age of its own ("5s, since …").
var oldestRe = regexp.MustCompile(`data-label="Oldest pending"><time datetime="[^"]+"><span class="date">\d{4}-\d\d-\d\d</span> \d\d:\d\d:\d\d UTC</time> <span class="ago">\((just now|\d+ (s|min|h|d) ago)\)</span></td>`)

// TestConsoleAgesAndRatesInWords: the overview gives the time the oldest
// pending message died with how long ago, as every time of the console; a rate of one reads
// "1 message per second", on a replay's page and on the confirmation.
func TestConsoleAgesAndRatesInWords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(5, "orders")...)
	c := b.signIn(t, tokAdmin)

	raw := c.get(t, "/ui/").text
	require.Regexp(t, oldestRe, raw)
	page := words(raw)
	require.NotContains(t, page, ", since", "the oldest pending reads as every time does")
	require.NotContains(t, page, "(since", "no nested parentheses")
	require.NotContains(t, page, "ago))")

	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	for i, rate := range []struct {
		n    float64
		want string
	}{{1, "1 message per second"}, {2, "2 messages per second"}, {0.5, "0.5 messages per second"}} {
		task, err := b.ops.StartReplay(context.Background(), admin, ops.ReplayRequest{Request: replay.Request{IDs: ids[i : i+1],
			RatePerSecond: rate.n, DelaySeconds: 600}})
		require.NoError(t, err)
		require.Contains(t, words(c.get(t, "/ui/replays/"+strconv.FormatInt(task.ID, 10)).text), "Rate "+rate.want)
	}

	confirm := words(c.confirmPage(t, url.Values{"action": {"replay"}, "id": {idString(ids[3]), idString(ids[4])}, "back": {"/ui/messages"},
		"rate": {"1"}, "canary_count": {"1"}, "canary_wait": {"30"}}).text)
	require.Contains(t, confirm, "At 1 message per second")
	require.Contains(t, confirm, "1 canary message first")
}
