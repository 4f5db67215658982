package ops_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The list of requests refreshes itself every few seconds, so it counts
// again what approving would act on only for requests of up to 20,000
// messages in all; a larger one is counted on its own page. (Counting a
// snapshot of a million takes about a second, at every refresh.)
func TestApprovalListCountsSmallRequestsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator)
	_, err := b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Confirm: true})
	small := pendingOf(t, err)
	_, err = b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "billing"}, Confirm: true})
	large := pendingOf(t, err)
	// The large one as if its snapshot held 30,000 messages.
	alterApproval(t, b, large.ID, `count = 30000`)

	views, err := b.ops.ApprovalViews(ctx, as(admin), 10)
	require.NoError(t, err)
	require.Len(t, views, 2)
	for _, v := range views {
		switch v.ID {
		case small.ID:
			require.NotNil(t, v.Now, "a small request is counted in the list")
			require.EqualValues(t, 3, v.Now.Count)
		case large.ID:
			require.Nil(t, v.Now, "a request past the list's budget is counted on its own page only")
			require.False(t, v.NowUnknown, "the list says its page counts it")
		}
	}
	v, err := b.ops.ApprovalViewOf(ctx, as(admin), large.ID, false)
	require.NoError(t, err)
	require.NotNil(t, v.Now, "its own page counts it")
	require.EqualValues(t, 3, v.Now.Count)
	// Its page refreshing itself every few seconds does not count it
	// again each time; the small one's does.
	v, err = b.ops.ApprovalViewOf(ctx, as(admin), large.ID, true)
	require.NoError(t, err)
	require.Nil(t, v.Now, "a large request counted again at every refresh of its page")
	require.False(t, v.NowUnknown, "the page says loading it counts it")
	v, err = b.ops.ApprovalViewOf(ctx, as(admin), small.ID, true)
	require.NoError(t, err)
	require.NotNil(t, v.Now)
}

// What approving would act on now is counted in the requester's scope: a
// scoped token sees a request its name made with a wider token, but not
// the counts of queues outside its own. One whose scope covers the
// request's sees them.
func TestApprovalNowOnlyWithinTheViewersScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator, ordersOps)
	wideReq, ownReq := wideAndOwnRequests(t, b, false)

	views, err := b.ops.ApprovalViews(ctx, as(ordersOps), 10)
	require.NoError(t, err)
	require.Len(t, views, 2, "both are its name's")
	for _, v := range views {
		switch v.ID {
		case wideReq.ID:
			require.Nil(t, v.Now, "the wider request's count covers queues it does not see")
			require.True(t, v.NowUnknown, "nor does its own page count it")
		case ownReq.ID:
			require.NotNil(t, v.Now, "a request within its scope is counted")
			require.EqualValues(t, 3, v.Now.Count)
		}
	}
	v, err := b.ops.ApprovalViewOf(ctx, as(ordersOps), wideReq.ID, false)
	require.NoError(t, err)
	require.Nil(t, v.Now, "nor on its own page")
	v, err = b.ops.ApprovalViewOf(ctx, as(admin), wideReq.ID, false)
	require.NoError(t, err)
	require.NotNil(t, v.Now, "an unscoped caller covers every request")
	require.EqualValues(t, 6, v.Now.Count)
}

// A request whose count fails leaves its Now empty; the list and the
// other requests' counts are still shown.
func TestApprovalNowFailedCountLeavesTheListShown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator)
	_, err := b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Confirm: true})
	ack := pendingOf(t, err)
	_, err = b.ops.StartReplay(ctx, as(operator), ops.ReplayRequest{Request: replay.Request{Filter: &store.Filter{SourceQueue: "billing"}}, Confirm: true})
	broken := pendingOf(t, err)
	// A request the count cannot read, while its selection still reads.
	alterApproval(t, b, broken.ID, `request = request || '{"rate_per_second": "fast"}'`)

	views, err := b.ops.ApprovalViews(ctx, as(admin), 10)
	require.NoError(t, err)
	require.Len(t, views, 2)
	for _, v := range views {
		switch v.ID {
		case ack.ID:
			require.NotNil(t, v.Now)
			require.EqualValues(t, 3, v.Now.Count)
		case broken.ID:
			require.Nil(t, v.Now, "its count failed")
			require.True(t, v.NowUnknown)
			require.NotEmpty(t, v.Sample, "the rest of its view stands")
		}
	}
	v, err := b.ops.ApprovalViewOf(ctx, as(admin), broken.ID, false)
	require.NoError(t, err)
	require.Nil(t, v.Now)
}

// The list's budget is spent only on what it counts: a newer request the
// caller's scope does not cover, however large, leaves its own counted.
func TestApprovalListBudgetSpentOnlyOnWhatItCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator, ordersOps)
	wideReq, ownReq := wideAndOwnRequests(t, b, true)
	alterApproval(t, b, wideReq.ID, `count = 19999`)

	views, err := b.ops.ApprovalViews(ctx, as(ordersOps), 10)
	require.NoError(t, err)
	require.Len(t, views, 2)
	for _, v := range views {
		if v.ID == ownReq.ID {
			require.NotNil(t, v.Now, "the wider request, not counted for this caller, spent the list's budget")
			require.EqualValues(t, 3, v.Now.Count)
		}
	}
}

// alterApproval changes approval id's row by set, for what no caller can
// make: a snapshot's size, a request the count cannot read.
func alterApproval(t *testing.T, b opsBundle, id int64, set string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `UPDATE approvals SET `+set+` WHERE id = $1`, id)
	require.NoError(t, err)
}

// wideAndOwnRequests makes two acknowledge requests by ordersOps' name:
// one with an unscoped token of that name (every queue), one with the
// orders-scoped token itself, the scoped one first when ownFirst.
func wideAndOwnRequests(t *testing.T, b opsBundle, ownFirst bool) (wideReq, ownReq store.Approval) {
	t.Helper()
	ctx := context.Background()
	wide := auth.Principal{Name: ordersOps.Name, Role: auth.RoleOperator, Bodies: true}
	requestWide := func() store.Approval {
		_, err := b.ops.Acknowledge(ctx, as(wide), ops.ActionRequest{Filter: &store.Filter{}, Confirm: true})
		return pendingOf(t, err)
	}
	requestOwn := func() store.Approval {
		_, err := b.ops.Acknowledge(ctx, as(ordersOps), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Confirm: true})
		return pendingOf(t, err)
	}
	if ownFirst {
		ownReq = requestOwn()
		return requestWide(), ownReq
	}
	wideReq = requestWide()
	return wideReq, requestOwn()
}

// An approved action's result says why it changed fewer messages than its
// request counted: a delete of 3 after one of them was deleted and another
// acknowledged deletes 2 (an acknowledged message is deleted too) and
// counts the one gone; an acknowledge counts the one acknowledged already
// apart from the one gone.
func TestApprovedResultSaysWhatItLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin2 := auth.Principal{Name: "admin2", Role: auth.RoleAdmin}
	b := newOps(t, admin, admin2, operator)
	page, err := b.ops.ListMessages(ctx, as(admin), ops.ListRequest{Filter: store.Filter{SourceQueue: "orders"}})
	require.NoError(t, err)
	require.Len(t, page.Messages, 3)
	_, err = b.ops.Delete(ctx, as(admin), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Confirm: true})
	del := pendingOf(t, err)
	_, err = b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "billing"}, Confirm: true})
	ack := pendingOf(t, err)
	// Since the requests: one of orders deleted, one acknowledged; one of
	// billing deleted, one acknowledged.
	billing, err := b.ops.ListMessages(ctx, as(admin), ops.ListRequest{Filter: store.Filter{SourceQueue: "billing"}})
	require.NoError(t, err)
	for _, ms := range [][]store.Message{page.Messages, billing.Messages} {
		_, err = b.ops.Delete(ctx, as(admin), ops.ActionRequest{IDs: []int64{ms[0].ID}})
		require.NoError(t, err)
		_, err = b.ops.Acknowledge(ctx, as(admin), ops.ActionRequest{IDs: []int64{ms[1].ID}})
		require.NoError(t, err)
	}

	result := func(a store.Approval) store.ActionResult {
		t.Helper()
		var res store.ActionResult
		require.NoError(t, json.Unmarshal(a.Result, &res))
		return res
	}
	approved, err := b.ops.Approve(ctx, as(admin2), del.ID)
	require.NoError(t, err)
	res := result(approved)
	require.Equal(t, store.ActionResult{Action: store.ActionDelete, Matched: 2, Changed: 2, Gone: 1}, res, string(approved.Result))
	approved, err = b.ops.Approve(ctx, as(admin), ack.ID)
	require.NoError(t, err)
	res = result(approved)
	require.Equal(t, store.ActionResult{Action: store.ActionAcknowledge, Matched: 2, Changed: 1, Unchanged: 1, Gone: 1}, res, string(approved.Result))
}
