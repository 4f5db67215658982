package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// testText is the text of the first element of page carrying
// data-test="name" ("" without one), as words reads it.
func testText(page, name string) string {
	i := strings.Index(page, `data-test="`+name+`"`)
	if i < 0 {
		return ""
	}
	start := strings.LastIndex(page[:i], "<")
	tag := page[start+1 : start+1+strings.IndexAny(page[start+1:], " >")]
	end := strings.Index(page[i:], "</"+tag+">")
	return words(page[start : i+end])
}

// TestApprovalShowsTheReplayItLets: an approver sees where a waiting
// replay would publish, how fast and when it would start, on the list and
// on the request's page; its page warns that the target exchange does
// not exist; approved, the flash says when it starts and that it will
// publish nothing, not "Done"; and the scheduled task's page warns again
// before it runs.
func TestApprovalShowsTheReplayItLets(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 1; o.live = true })
	ids := b.seed(t, many(2, "orders")...)
	missing := dlqtest.Name(t, "walk.nope")
	op := ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole}
	_, err := b.ops.StartReplay(context.Background(), op, ops.ReplayRequest{Confirm: true, Request: replay.Request{IDs: ids,
		RatePerSecond: 5, DelaySeconds: 300, Target: &replay.Target{Exchange: missing, RoutingKey: "orders.retry"}}})
	var pa *ops.PendingApproval
	require.True(t, errors.As(err, &pa), "waits for approval: %v", err)
	id := idString(pa.Approval.ID)

	admin := b.signIn(t, tokAdmin)
	want := `Replays to exchange "` + missing + `" with routing key "orders.retry"; at 5 messages per second; starting 5 min after it is approved.`
	list := admin.get(t, "/ui/approvals")
	require.Equal(t, http.StatusOK, list.StatusCode, list.text)
	require.Equal(t, want, testText(list.text, "approval-replay"), "the list shows the target, rate and delay")
	require.NotContains(t, list.text, `data-test="target-missing"`, "the list does not ask the broker at each refresh")

	one := admin.get(t, "/ui/approvals/"+id)
	require.Equal(t, http.StatusOK, one.StatusCode, one.text)
	require.Equal(t, want, testText(one.text, "approval-replay"))
	warn := testText(one.text, "target-missing")
	require.Contains(t, warn, `Exchange "`+missing+`" does not exist on the broker: nothing would be published.`)
	require.Contains(t, warn, "Check the target's name, or declare the exchange first.")

	r := admin.follow(t, admin.act(t, "/ui/approvals/"+id, url.Values{"decision": {"approve"}}))
	flash := flashWords(r.text)
	require.True(t, strings.HasPrefix(flash, "Note: approval "+id+" is approved. Replay scheduled to start at "), flash)
	require.Contains(t, flash, "(in 5 min)")
	require.Contains(t, flash, "as things stand it will publish nothing: exchange \""+missing+"\" does not exist on the broker")
	require.NotContains(t, flash, "Done")

	a, err := b.st.GetApproval(context.Background(), pa.Approval.ID)
	require.NoError(t, err)
	task := readTaskID(t, a)
	page := admin.get(t, "/ui/replays/"+idString(task))
	require.Equal(t, http.StatusOK, page.StatusCode, page.text)
	require.Contains(t, testText(page.text, "target-missing"), `Exchange "`+missing+`" does not exist on the broker`,
		"a scheduled replay's page warns before it runs")
	require.Equal(t, `exchange "`+missing+`" with routing key "orders.retry"`, testText(page.text, "replay-to"))
}

// readTaskID is the replay task an approved replay request runs as.
func readTaskID(t *testing.T, a store.Approval) int64 {
	t.Helper()
	var res struct {
		TaskID int64 `json:"task_id"`
	}
	require.NoError(t, json.Unmarshal(a.Result, &res), string(a.Result))
	require.NotZero(t, res.TaskID, string(a.Result))
	return res.TaskID
}

// TestApprovedFlashSaysWhatChanged: an acknowledge of 4 approved after one
// of them was acknowledged and another deleted says it acknowledged 2,
// and why it left the other two, not that "the acknowledge of 4 ran"; the
// request's row says the same.
func TestApprovedFlashSaysWhatChanged(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 1 })
	ids := b.seed(t, many(4, "orders")...)
	ctx := context.Background()
	op := ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole}
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	_, err := b.ops.Acknowledge(ctx, op, ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Confirm: true})
	var pa *ops.PendingApproval
	require.True(t, errors.As(err, &pa), "waits for approval: %v", err)
	_, err = b.ops.Acknowledge(ctx, admin, ops.ActionRequest{IDs: ids[:1]})
	require.NoError(t, err)
	_, err = b.ops.Delete(ctx, admin, ops.ActionRequest{IDs: ids[1:2]})
	require.NoError(t, err)

	c := b.signIn(t, tokAdmin)
	id := idString(pa.Approval.ID)
	r := c.follow(t, c.act(t, "/ui/approvals/"+id, url.Values{"decision": {"approve"}, "back": {"/ui/approvals/" + id}}))
	require.Equal(t, "Done: approval "+id+" is approved: the acknowledge of 4 messages ran: 2 messages acknowledged; "+
		"of the others, 1 was already acknowledged, 1 was deleted since it was asked for.", flashWords(r.text))
	require.Equal(t, "acknowledge: 2 changed; 1 was already acknowledged, 1 was deleted since it was asked for",
		testText(r.text, "approval-outcome"))
	st := b.statuses(t, ids)
	require.Equal(t, store.StatusAcknowledged, st[ids[2]])
	require.Equal(t, store.StatusAcknowledged, st[ids[3]])
}
