package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The console at 3 a.m.: what a replay delivered, who asked and who
// approved, what an approval selects, and actions that Back cannot repeat.

// waitFinished polls a task until it has finished.
func (b *bundle) waitFinished(t *testing.T, id int64) replay.Task {
	t.Helper()
	var task replay.Task
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		var err error
		task, err = b.ops.GetReplay(context.Background(), ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}, id)
		require.NoError(t, err)
		return task.Outcome != ""
	}, "replay %d does not finish", id)
	return task
}

func idString(id int64) string { return strconv.FormatInt(id, 10) }

// TestBrowserReplayOutcomes: a replay to an exchange that does not exist
// completes but delivers nothing, and the console says so in words and
// colour, on the list and on its page, with the reason and a link to the
// messages that failed; a replay that delivered some shows partial.
func TestBrowserReplayOutcomes(t *testing.T) {
	t.Parallel()
	q, _ := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	seeded := b.seed(t, many(3, q)...)
	// ids fail (to a missing exchange); routable is published by the
	// partial replay. Apart, so neither task's outcome changes the other's
	// messages (a message the partial replay published loses the reason
	// the link below filters on).
	ids, routable := seeded[:2], seeded[2]
	nowhere := b.seed(t, many(2, dlqtest.Name(t, "no-such-queue"))...) // unroutable: no queue of that name
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	missing := dlqtest.Name(t, "no-such-exchange")
	none, err := b.ops.StartReplay(context.Background(), admin, ops.ReplayRequest{Request: replay.Request{IDs: ids,
		Target: &replay.Target{Exchange: missing, RoutingKey: "k"}}})
	require.NoError(t, err)
	part, err := b.ops.StartReplay(context.Background(), admin, ops.ReplayRequest{Request: replay.Request{IDs: append([]int64{routable}, nowhere...)}})
	require.NoError(t, err)
	require.Equal(t, replay.OutcomeNonePublished, b.waitFinished(t, none.ID).Outcome)
	require.Equal(t, replay.OutcomePartial, b.waitFinished(t, part.ID).Outcome)

	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/replays")
	status := func(id int64) string {
		return `[data-test="replay-row"][data-id="` + idString(id) + `"] [data-test="replay-status"]`
	}
	require.Equal(t, []string{"none_published"}, tb.attrs(t, status(none.ID), "data-outcome"))
	require.Equal(t, []string{"partial"}, tb.attrs(t, status(part.ID), "data-outcome"))
	row := strings.Join(tb.texts(t, `[data-test="replay-row"][data-id="`+idString(none.ID)+`"]`), " ")
	require.Contains(t, row, "nothing published", "in words, not colour alone")
	require.Contains(t, strings.Join(tb.texts(t, `[data-test="replay-row"][data-id="`+idString(part.ID)+`"]`), " "), "partly published")
	require.Contains(t, row, "2 messages: #", "the selection in words")
	// Not green: the completed badge takes the outcome's colour.
	okColour := get(t, tb, chromedp.Evaluate[string](`getComputedStyle(document.documentElement).getPropertyValue("--ok").trim()`))
	badge := get(t, tb, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('`+status(none.ID)+`')).color`))
	require.NotEqual(t, "rgb(26, 127, 55)", badge, "the --ok green (%s)", okColour)
	accent := get(t, tb, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('[data-test="replay-row"][data-id="`+idString(none.ID)+`"] [data-test="progress"]')).accentColor`))
	require.Equal(t, "rgb(180, 35, 24)", accent, "a full bar of failures is drawn in the colour of failure")

	tb.open(t, "/ui/replays/"+idString(none.ID))
	require.Equal(t, []string{"none_published"}, tb.attrs(t, `[data-test="replay-status"]`, "data-outcome"))
	errs := tb.texts(t, `[data-test="replay-error"]`)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "does not exist", "the reason")
	require.Contains(t, errs[0], "2")
	require.Contains(t, tb.texts(t, `[data-test="replay-requested-by"]`)[0], "admin")
	require.Contains(t, tb.texts(t, `[data-test="replay-approved-by"]`)[0], "no approval")
	tb.submit(t, `[data-test="replay-error"] a`)
	require.ElementsMatch(t, ids, tb.rowIDs(t), "the link lists the messages that failed for that reason")

	tb.open(t, "/ui/replays/"+idString(part.ID))
	require.Equal(t, []string{"partial"}, tb.attrs(t, `[data-test="replay-status"]`, "data-outcome"))
	require.Len(t, tb.texts(t, `[data-test="replay-error"]`), 1, "the unroutable ones")
	tb.quiet(t)
}

var approvalRowID = regexp.MustCompile(`data-test="approval-row" data-id="(\d+)"`)

// TestBrowserApprovalOfAGroupReplay: an operator asks to replay a failure
// group above the threshold: the confirmation says it will wait for the
// admin, and the flash says it waits (not "Done"). The admin's navigation
// counts it; its row names the group by its title and links to the
// selected messages; only the admin gets approve and reject, only the
// requester withdraw. Approved, the task names the operator as requester
// and the admin as approver, and its audit row records the group.
func TestBrowserApprovalOfAGroupReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 2 })
	ids := b.seed(t, many(3, "orders")...)
	op := newTab(t, b)
	op.signIn(t, tokOp)
	op.open(t, "/ui/groups")
	op.submit(t, `[data-test="group-replay"]`)
	notice := strings.Join(op.texts(t, `[data-test="approval-notice"]`), " ")
	require.Contains(t, notice, "waits for approval by admin", "the confirmation says approval is needed, and who can give it")
	op.submit(t, `[data-test="confirm"]`)
	flash := op.flash(t)
	require.Contains(t, flash, "Waiting for approval by admin")
	require.NotContains(t, flash, "Done")
	require.Equal(t, 1, op.count(t, `[data-test="flash"] a[href^="/ui/approvals/"]`))

	op.open(t, "/ui/approvals")
	require.Equal(t, 1, op.count(t, `[data-test="approval-row"]`))
	require.Zero(t, op.count(t, `[data-test="approve"], [data-test="reject"]`), "not for the requester")
	require.Equal(t, 1, op.count(t, `[data-test="withdraw"]`))

	admin := newTab(t, b)
	admin.signIn(t, tokAdmin)
	require.Equal(t, []string{"1"}, admin.texts(t, `[data-test="approvals-count"]`), "one request waits for the admin")
	admin.open(t, "/ui/approvals")
	sel := admin.texts(t, `[data-test="approval-selection"]`)[0]
	require.Contains(t, sel, "failure group “PaymentDeclined: declined by issuer”", "the group by its title")
	require.NotRegexp(t, `[0-9a-f]{16}`, sel, "not its hex id")
	require.Contains(t, sel, "3 selected messages")
	require.Zero(t, admin.count(t, `[data-test="withdraw"]`))
	admin.submit(t, `[data-test="approval-messages"]`)
	require.ElementsMatch(t, ids, admin.rowIDs(t), "the link lists the selected messages")
	admin.open(t, "/ui/approvals")
	admin.submit(t, `[data-test="approve"]`)
	require.Contains(t, admin.flash(t), "is approved")
	require.Equal(t, []string{"0"}, admin.texts(t, `[data-test="approvals-count"]`))
	admin.submit(t, `[data-test="flash"] a[href^="/ui/replays/"]`)
	require.Equal(t, "ops", admin.texts(t, `[data-test="replay-requested-by"]`)[0])
	require.Contains(t, admin.texts(t, `[data-test="replay-approved-by"]`)[0], "admin")
	require.Contains(t, admin.texts(t, `[data-test="replay-source"]`)[0], "PaymentDeclined: declined by issuer")

	admin.open(t, "/ui/audit?action=replay")
	rows := admin.texts(t, `[data-test="audit-row"][data-action="replay"]`)
	require.Len(t, rows, 1)
	require.Contains(t, rows[0], "ops")
	require.Contains(t, rows[0], "approved by admin")
	require.Contains(t, admin.texts(t, `[data-test="audit-row"][data-action="replay"] [data-test="audit-selection"]`)[0],
		"PaymentDeclined: declined by issuer", "the group as asked, not {\"status\":\"all\"}")
	op.quiet(t)
	admin.quiet(t)
}

// TestApprovalControlsAndRefusals: approve and reject only for a
// principal who may decide; withdraw works for the requester and not for
// others; a request nobody configured could approve is refused at once,
// with the reason, and the confirmation said so beforehand.
func TestApprovalControlsAndRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 2 })
	ids := b.seed(t, many(3, "orders")...)
	all := url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_source_queue": {"orders"}, "max_id": {idString(ids[2])}, "back": {"/ui/messages"}}
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/act", all)
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	r = op.get(t, "/ui/approvals")
	m := approvalRowID.FindStringSubmatch(r.text)
	require.NotNil(t, m, r.text)
	id := m[1]

	for _, c := range []struct {
		token                     string
		decide, withdraw, comment string
	}{
		{tokOp, "", "withdraw", "the requester withdraws, never decides"},
		{tokAdmin, "approve", "", "the admin decides"},
		{tokScoped, "", "", "a request over every queue is not the scoped operator's to decide"},
		{tokViewer, "", "", "a viewer decides nothing"},
	} {
		page := b.signIn(t, c.token).get(t, "/ui/approvals").text
		require.Equal(t, c.decide != "", strings.Contains(page, `data-test="approve"`), c.comment)
		require.Equal(t, c.decide != "", strings.Contains(page, `data-test="reject"`), c.comment)
		require.Equal(t, c.withdraw != "", strings.Contains(page, `data-test="withdraw"`), c.comment)
	}
	r = b.signIn(t, tokAdmin).act(t, "/ui/approvals/"+id, url.Values{"decision": {"withdraw"}})
	require.Equal(t, http.StatusForbidden, r.StatusCode, "only its requester withdraws")
	require.Contains(t, r.text, "only its requester may withdraw it")
	r = op.act(t, "/ui/approvals/"+id, url.Values{"decision": {"withdraw"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Contains(t, op.follow(t, r).text, "is withdrawn")
	r = b.signIn(t, tokAdmin).act(t, "/ui/approvals/"+id, url.Values{"decision": {"approve"}})
	require.Equal(t, http.StatusConflict, r.StatusCode, "withdrawn: nothing to approve")
	for _, s := range b.statuses(t, ids) {
		require.Equal(t, store.StatusPending, s)
	}

	// Only one admin is configured: its delete of 3 can never be approved.
	admin := b.signIn(t, tokAdmin)
	del := url.Values{"action": {"delete"}, "all": {"1"}, "f_source_queue": {"orders"}, "back": {"/ui/messages"}}
	r = admin.follow(t, admin.act(t, "/ui/confirm", del))
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Contains(t, r.text, "nobody can give it", "the confirmation says so before")
	require.NotContains(t, r.text, `data-test="confirm"`, "and offers no button that can only be refused")
	require.Contains(t, r.text, `<a href="/ui/messages" autofocus>Back</a>`, "only the way back")
	del.Set("max_id", idString(ids[2]))
	r = admin.act(t, "/ui/act", del)
	require.Equal(t, http.StatusForbidden, r.StatusCode, "refused at once: %s", r.text)
	require.Contains(t, r.text, "no configured token but admin may approve it")
	require.Contains(t, r.text, "Select at most 2 messages")
	require.Len(t, b.statuses(t, ids), 3)
	require.NotContains(t, admin.get(t, "/ui/approvals").text, `data-status="pending"`, "nothing waits")
}

// TestBrowserBackResubmitsNothing: after an action, the browser's Back
// returns to pages fetched with GET: no resubmission prompt, no second
// action.
func TestBrowserBackResubmitsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(3, "orders")...)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages?source_queue=orders")
	tb.do(t, click(`[data-test="message-row"][data-id="`+idString(ids[1])+`"] [data-test="select"]`))
	tb.submit(t, `[data-test="bulk-ack"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Acknowledge 1 message?")
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "Acknowledged 1 message")
	require.Contains(t, get(t, tb, chromedp.Location()), "/ui/messages?source_queue=orders", "back where it came from")
	audits := func() int {
		var n int
		require.NoError(t, b.db.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE action = 'acknowledge'`).Scan(&n))
		return n
	}
	require.Equal(t, 1, audits())

	// history.back() and forward() from the page, as the browser's
	// buttons do; each step waits for the page it leads to.
	step := func(js, path, h1 string) {
		t.Helper()
		tb.do(t, chromedp.Evaluate[chromedp.Void](js))
		tb.eventually(t, 20*time.Second, `location.pathname === `+strconv.Quote(path)+` && document.readyState === "complete" && `+
			`(document.querySelector("main h1") || {textContent: ""}).textContent.includes(`+strconv.Quote(h1)+`)`,
			"after "+js+": the page "+path+" with its heading "+h1+", fetched with GET (no resubmission page)")
	}
	step("history.back()", "/ui/confirm", "Acknowledge")
	step("history.back()", "/ui/messages", "Messages")
	step("history.forward()", "/ui/confirm", "Acknowledge")
	step("history.forward()", "/ui/messages", "Messages")
	tb.open(t, "/ui/messages?source_queue=orders")
	require.Empty(t, tb.flash(t), "the flash is shown once")
	require.Equal(t, 1, audits(), "no second action")
	require.Equal(t, store.StatusAcknowledged, b.statuses(t, ids)[ids[1]])
	tb.quiet(t)
}

// TestBrowserOperatorAudit: an operator scoped to orders reads the audit
// rows of orders and not those of billing.
func TestBrowserOperatorAudit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orders := b.seed(t, many(2, "orders")...)
	billing := b.seed(t, many(2, "billing")...)
	ctx := context.Background()
	ack := func(token string, f store.Filter) {
		t.Helper()
		_, err := b.ops.Acknowledge(ctx, ops.Caller{Principal: mustPrincipal(t, b, token), Via: ops.ViaAPI, RequestID: "req-" + token[:4]},
			ops.ActionRequest{Filter: &f, Limit: 1, Confirm: true})
		require.NoError(t, err)
	}
	ack(tokAdmin, store.Filter{SourceQueue: "billing"})
	ack(tokAdmin, store.Filter{SourceQueue: "orders"})
	ack(tokScoped, store.Filter{})
	_ = orders
	_ = billing

	tb := newTab(t, b)
	tb.signIn(t, tokScoped)
	require.Equal(t, 1, tb.count(t, `a[href="/ui/audit"]`), "the audit is in the navigation")
	tb.open(t, "/ui/audit")
	rows := tb.texts(t, `[data-test="audit-row"]`)
	require.Len(t, rows, 2, "%v", rows)
	for _, r := range rows {
		require.NotContains(t, r, "billing")
	}
	text := get(t, tb, chromedp.Evaluate[string](`document.body.innerText`))
	require.NotContains(t, text, "billing")
	tb.quiet(t)
}
