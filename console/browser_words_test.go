package console_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The console's words for what the on-call reads at the moment of acting
// and afterwards: a selection by its failure group's title, not its key;
// an audit row's decision or cancel in words, linked; skip reasons in
// words, not codes.

// TestBrowserConfirmNamesTheSelection: the confirmation of a group's
// acknowledge names the group by its failure and queue, not its hex key,
// and links to the messages it selects; from the messages page, the
// filter's other conditions are named too; a replay's confirmation says
// why messages would be skipped in words.
func TestBrowserConfirmNamesTheSelection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(3, "orders")...)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/groups")
	tb.submit(t, `[data-test="group-ack"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))), "Acknowledge 3 messages?")
	sel := tb.texts(t, `[data-test="confirm-selection"]`)
	require.Len(t, sel, 1)
	require.Equal(t, "pending messages of failure group “PaymentDeclined: declined by issuer” in queue orders", sel[0])
	require.NotRegexp(t, `[0-9a-f]{16}`, tb.texts(t, `#confirm-what`)[0], "not the group's hex key")
	href := tb.attrs(t, `[data-test="confirm-messages"]`, "href")
	require.Len(t, href, 1)
	u, err := url.Parse(href[0])
	require.NoError(t, err)
	key := u.Query().Get("group")
	require.NotEmpty(t, key, href[0])
	tb.submit(t, `[data-test="confirm-messages"]`)
	require.ElementsMatch(t, ids, tb.rowIDs(t), "the link lists the messages it selects")

	// From the messages page, filtered by the group and a reason.
	tb.open(t, "/ui/messages?"+url.Values{"group": {key}, "reason": {"rejected"}}.Encode())
	tb.do(t, click(`[data-test="select-all-matching"]`))
	tb.submit(t, `[data-test="bulk-ack"]`)
	sel = tb.texts(t, `[data-test="confirm-selection"]`)
	require.Len(t, sel, 1)
	require.Equal(t, "pending messages of failure group “PaymentDeclined: declined by issuer” in queue orders, reason rejected", sel[0])

	// A replay of two, one of them acknowledged: the skip in words.
	_, err = b.st.Acknowledge(context.Background(), store.Filter{IDs: ids[:1], Status: "all"},
		store.Actor{Name: "someone", Via: "api"}, store.ActionOptions{Confirm: true})
	require.NoError(t, err)
	tb.open(t, "/ui/messages?status=all&source_queue=orders")
	for _, id := range ids[:2] {
		tb.do(t, click(`[data-test="message-row"][data-id="`+idString(id)+`"] [data-test="select"]`))
	}
	tb.submit(t, `[data-test="bulk-replay"]`)
	what := strings.Join(tb.texts(t, `.confirm`), " ")
	require.Contains(t, what, "1 selected message is left as it is (1 not pending any more).")
	require.NotContains(t, what, "not_pending")
	tb.quiet(t)
}

// TestBrowserAuditRowsInWords: the audit says what a rejection, an
// approval, a withdrawal and a replay's cancel did in words, each linked
// to its request or replay (the rejection with its reason), and a
// replay's row links to its task.
func TestBrowserAuditRowsInWords(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 2 })
	ids := b.seed(t, many(3, "orders")...)
	ctx := context.Background()
	op := ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaAPI}
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaAPI}
	request := func() int64 {
		t.Helper()
		_, err := b.ops.Acknowledge(ctx, op, ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Confirm: true})
		var pa *ops.PendingApproval
		require.True(t, errors.As(err, &pa), "%v", err)
		return pa.Approval.ID
	}
	// Not run (no broker): the task waits, and is cancelled.
	task, err := b.ops.StartReplay(ctx, op, ops.ReplayRequest{Request: replay.Request{IDs: ids[:1]}, Confirm: true})
	require.NoError(t, err)
	_, err = b.ops.CancelReplay(ctx, op, task.ID)
	require.NoError(t, err)
	rejected := request()
	_, err = b.ops.Reject(ctx, admin, rejected, "too many at once")
	require.NoError(t, err)
	withdrawn := request()
	_, err = b.ops.Withdraw(ctx, op, withdrawn)
	require.NoError(t, err)
	approved := request()
	_, err = b.ops.Approve(ctx, admin, approved)
	require.NoError(t, err)

	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	tb.open(t, "/ui/audit")
	words := func(action string) string {
		t.Helper()
		w := tb.texts(t, `[data-test="audit-row"][data-action="`+action+`"] [data-test="audit-selection"]`)
		require.Len(t, w, 1, action)
		return w[0]
	}
	link := func(action, href string) {
		t.Helper()
		require.Equal(t, 1, tb.count(t, `[data-test="audit-row"][data-action="`+action+`"] [data-test="audit-selection"] a[href="`+href+`"]`),
			"%s links to %s", action, href)
	}
	require.Equal(t, "rejected request "+idString(rejected)+": “too many at once”", words(store.ActionReject))
	link(store.ActionReject, "/ui/approvals/"+idString(rejected))
	require.Equal(t, "withdrew request "+idString(withdrawn), words(store.ActionApprovalWithdraw))
	link(store.ActionApprovalWithdraw, "/ui/approvals/"+idString(withdrawn))
	require.Equal(t, "approved request "+idString(approved), words(store.ActionApprove))
	link(store.ActionApprove, "/ui/approvals/"+idString(approved))
	require.Equal(t, "cancelled replay "+idString(task.ID), words("replay_cancel"))
	link("replay_cancel", "/ui/replays/"+idString(task.ID))
	require.Contains(t, words("replay"), "as replay "+idString(task.ID))
	link("replay", "/ui/replays/"+idString(task.ID))
	require.Contains(t, words(store.ActionAcknowledge), "approved in request "+idString(approved), "the acknowledge that ran on approval")
	tb.submit(t, `[data-test="audit-row"][data-action="replay_cancel"] [data-test="audit-selection"] a`)
	require.Contains(t, get(t, tb, chromedp.Location()), "/ui/replays/"+idString(task.ID))
	tb.quiet(t)
}
