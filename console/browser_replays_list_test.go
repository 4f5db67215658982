package console_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// TestBrowserReplaysListCounts: a replay row shows its counts as one
// labelled line each, zeros left out but published, the skip reasons in
// words, and what it sent again still under data-test "republished"; at
// 800 px the row is a card with the cell labelled and no sideways scroll.
func TestBrowserReplaysListCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(3, "orders")...)
	ctx := context.Background()
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	task, err := b.ops.StartReplay(ctx, admin, ops.ReplayRequest{Request: replay.Request{IDs: ids, DelaySeconds: 600}})
	require.NoError(t, err)
	// No runner here: the task's outcome is written as a runner would.
	_, err = b.db.Exec(ctx, `UPDATE replay_task_items SET outcome = 'skipped', detail = 'status is acknowledged'
WHERE task_id = $1 AND message_id = ANY($2)`, task.ID, ids[:2])
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `UPDATE replay_task_items SET outcome = 'failed', detail = 'no route' WHERE task_id = $1 AND message_id = $2`,
		task.ID, ids[2])
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `UPDATE replay_tasks SET status = 'completed', claimed = 3, failed = 1, skipped = 2, finished_at = now()
WHERE id = $1`, task.ID)
	require.NoError(t, err)

	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	tb.open(t, "/ui/replays")
	row := `[data-test="replay-row"][data-id="` + strconv.FormatInt(task.ID, 10) + `"]`
	visible := func() []string {
		return get(t, tb, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+strconv.Quote(row+` [data-test="replay-count"]`)+`)).
			filter(e => e.getClientRects().length).map(e => e.getAttribute("data-outcome") + "=" + e.getAttribute("data-count") + ": " + e.textContent.trim().replace(/\s+/g, " "))`))
	}
	require.Equal(t, []string{"published=0: published 0", "failed=1: failed 1", "skipped=2: skipped 2 (2 not pending any more)"}, visible(),
		"one labelled item per count, zeros left out but published")
	require.Equal(t, []string{"0"}, tb.texts(t, row+` [data-test="republished"]`), "what it sent again keeps its data-test")
	require.NotContains(t, strings.Join(tb.texts(t, `table.replays thead th`), " "), "Published, failed", "no squeezed header")
	tops := get(t, tb, chromedp.Evaluate[[]float64](`Array.from(document.querySelectorAll(`+strconv.Quote(row+` [data-test="replay-count"]`)+`)).
		filter(e => e.getClientRects().length).map(e => Math.round(e.getBoundingClientRect().top))`))
	require.Len(t, tops, 3)
	require.True(t, tops[0] < tops[1] && tops[1] < tops[2], "each count on a line of its own: %v", tops)
	require.Empty(t, tb.brokenMidWord(t, row+` [data-test="replay-count"]`), "a count cut inside a word")

	tb.do(t, chromedp.EmulateViewport(800, 900))
	tb.open(t, "/ui/replays")
	require.Equal(t, "block", get(t, tb, chromedp.Evaluate[string](`getComputedStyle(document.querySelector(`+strconv.Quote(row)+`)).display`)))
	require.Equal(t, `"Messages: "`, get(t, tb, chromedp.Evaluate[string](`getComputedStyle(document.querySelector(`+
		strconv.Quote(row+` td[data-label="Messages"]`)+`), "::before").content`)))
	require.Len(t, visible(), 3)
	require.Zero(t, tb.sideways(t), "/ui/replays at 800 px scrolls sideways")
	tb.quiet(t)
}

// TestBrowserReplaysListTargetAndEdit: each replay row says where it
// publishes (its source, or the exchange and routing key it was given),
// and an edit-then-replay's row links the message it is an edit of.
func TestBrowserReplaysListTargetAndEdit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(3, "orders")...)
	ctx := context.Background()
	op := ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole}
	toSource, err := b.ops.StartReplay(ctx, op, ops.ReplayRequest{Request: replay.Request{IDs: ids[:1], DelaySeconds: 600}})
	require.NoError(t, err)
	toTarget, err := b.ops.StartReplay(ctx, op, ops.ReplayRequest{Request: replay.Request{IDs: ids[1:2], DelaySeconds: 600,
		Target: &replay.Target{Exchange: "billing-x", RoutingKey: "invoices.retry"}}})
	require.NoError(t, err)
	body := `{"order":"fixed"}`
	edit, err := b.ops.EditReplay(ctx, op, ids[2], ops.EditRequest{Body: &body})
	require.NoError(t, err)
	require.NotNil(t, edit.Task)

	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/replays")
	row := func(id int64) string { return `[data-test="replay-row"][data-id="` + strconv.FormatInt(id, 10) + `"]` }
	require.Equal(t, []string{"to its source"}, tb.texts(t, row(toSource.ID)+` [data-test="replay-target"]`))
	require.Equal(t, []string{"to billing-x/invoices.retry"}, tb.texts(t, row(toTarget.ID)+` [data-test="replay-target"]`))
	require.Equal(t, []string{"to its source"}, tb.texts(t, row(edit.Task.ID)+` [data-test="replay-target"]`))
	require.Equal(t, []string{"edit of message #" + idString(ids[2])}, tb.texts(t, row(edit.Task.ID)+` [data-test="replay-edit-of"]`))
	require.Equal(t, []string{"/ui/messages/" + idString(ids[2])}, tb.attrs(t, row(edit.Task.ID)+` [data-test="replay-edit-of"]`, "href"))
	require.Zero(t, tb.count(t, row(toSource.ID)+` [data-test="replay-edit-of"], `+row(toTarget.ID)+` [data-test="replay-edit-of"]`),
		"only the edit's row says it is one")
	tb.submit(t, row(edit.Task.ID)+` [data-test="replay-edit-of"]`)
	require.Equal(t, "/ui/messages/"+idString(ids[2]), get(t, tb, chromedp.Evaluate[string](`location.pathname`)))
	tb.quiet(t)
}

// TestBrowserGroupShowsWaitingApproval: a failure group's page names the
// request waiting for approval of an action on its messages (what, how
// many, by whom, linked), to every viewer who may see it, and not a
// request on another group; once decided, the notice is gone.
func TestBrowserGroupShowsWaitingApproval(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 3 })
	b.seed(t, append(many(5, "orders"), many(4, "billing")...)...)
	ctx := context.Background()
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	op := ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole}
	groupOf := func(queue string) string {
		gs, err := b.ops.Groups(ctx, admin, store.GroupQuery{SourceQueue: queue})
		require.NoError(t, err)
		require.Len(t, gs, 1)
		return gs[0].ID
	}
	orders, billing := groupOf("orders"), groupOf("billing")
	request := func(queue, group string) int64 {
		_, err := b.ops.Acknowledge(ctx, op, ops.ActionRequest{Filter: &store.Filter{SourceQueue: queue, Group: group}, Confirm: true})
		var pa *ops.PendingApproval
		require.True(t, errors.As(err, &pa), "an approval request: %v", err)
		return pa.Approval.ID
	}
	waiting := request("orders", orders)
	request("billing", billing)

	for who, tok := range map[string]string{"admin": tokAdmin, "viewer": tokViewer} {
		tb := newTab(t, b)
		tb.signIn(t, tok)
		tb.open(t, "/ui/groups/"+orders)
		notice := `[data-test="group-approval-waiting"]`
		require.Equal(t, []string{idString(waiting)}, tb.attrs(t, notice, "data-id"), "%s sees the one request of this group", who)
		text := strings.Join(tb.texts(t, notice), " ")
		require.Contains(t, text, "A request to acknowledge 5 messages of this group waits for approval")
		require.Contains(t, text, "request #"+idString(waiting)+", by ops")
		require.Equal(t, []string{"/ui/approvals/" + idString(waiting)}, tb.attrs(t, notice+` a`, "href"))
		tb.quiet(t)
	}

	_, err := b.ops.Reject(ctx, admin, waiting, "not now")
	require.NoError(t, err)
	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)
	tb.open(t, "/ui/groups/"+orders)
	require.Zero(t, tb.count(t, `[data-test="group-approval-waiting"]`), "a decided request waits no more")
	tb.quiet(t)
}
