package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The principals of these tests: one admin, an operator, an operator of
// orders, a viewer.
var (
	admin     = auth.Principal{Name: "admin", Role: auth.RoleAdmin, Bodies: true}
	operator  = auth.Principal{Name: "ops", Role: auth.RoleOperator, Bodies: true}
	ordersOps = auth.Principal{Name: "orders-ops", Role: auth.RoleOperator, Queues: []string{"orders"}, Bodies: true}
	viewer    = auth.Principal{Name: "viewer", Role: auth.RoleViewer}
)

func as(p auth.Principal) ops.Caller {
	return ops.Caller{Principal: p, Via: ops.ViaAPI, RequestID: "req-" + p.Name}
}

type opsBundle struct {
	st  *store.Store
	dsn string
	ops *ops.Service
}

// newOps is a layer over a fresh store holding 3 pending messages in
// orders and 3 in billing, asking for approval above 2 messages, with
// principals as the configured tokens.
func newOps(t *testing.T, principals ...auth.Principal) opsBundle {
	t.Helper()
	st, dsn := dlqtest.Store(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rp, err := replay.New(replay.Config{Store: st, Logger: log, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	cfg := ops.Config{Store: st, Replays: rp, ApprovalAbove: 2, Logger: log}
	if principals != nil {
		cfg.Principals = func() []auth.Principal { return principals }
	}
	o, err := ops.New(cfg)
	require.NoError(t, err)
	var msgs []store.NewMessage
	now := time.Now().UTC()
	for i, q := range []string{"orders", "orders", "orders", "billing", "billing", "billing"} {
		msgs = append(msgs, store.NewMessage{MessageID: fmt.Sprintf("m-%d", i), SourceQueue: q, SourceRoutingKey: q,
			DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1, FailureType: "Declined", FailureMessage: "declined by issuer",
			Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`), Body: []byte(`{}`), FirstFailedAt: now, FailedAt: now,
			Fingerprint: int64(i + 1)})
	}
	_, err = st.IngestBatch(context.Background(), store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: msgs})
	require.NoError(t, err)
	return opsBundle{st: st, dsn: dsn, ops: o}
}

func pendingOf(t *testing.T, err error) store.Approval {
	t.Helper()
	var pa *ops.PendingApproval
	require.ErrorAs(t, err, &pa)
	return pa.Approval
}

// A request that no configured principal but its requester may approve
// is refused at once, saying why and what to do; nothing is recorded.
// One that others may approve waits, and they are named.
func TestApprovalNobodyCouldApproveIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator, ordersOps, viewer)
	all := &store.Filter{Status: "all"}

	_, err := b.ops.Delete(ctx, as(admin), ops.ActionRequest{Filter: all, Confirm: true})
	require.ErrorIs(t, err, ops.ErrForbidden, "only one admin: nobody else may approve a delete")
	require.Equal(t, ops.CodeForbidden, ops.Classify(err))
	require.Equal(t, ops.ReasonNoApprover, ops.Reason(err), "told from a refused role")
	for _, want := range []string{"needs a second person's approval", "no configured token but admin may approve it", "role admin",
		"Select at most 2 messages", "second token"} {
		require.Contains(t, err.Error(), want)
	}
	list, err := b.ops.ListApprovals(ctx, as(admin), 10)
	require.NoError(t, err)
	require.Empty(t, list, "nothing recorded")
	page, err := b.ops.Audit(ctx, as(admin), ops.AuditRequest{})
	require.NoError(t, err)
	require.Empty(t, page.Entries, "nothing audited")

	n := b.ops.NoticeApproval(as(admin), store.ActionDelete, 6)
	require.True(t, n.Needed)
	require.Empty(t, n.Approvers)
	n = b.ops.NoticeApproval(as(operator), store.ActionAcknowledge, 6)
	require.Equal(t, []string{"admin"}, n.Approvers, "an unscoped request: not the scoped operator, not the viewer, not the requester")
	n = b.ops.NoticeApproval(as(ordersOps), store.ActionAcknowledge, 3)
	require.Equal(t, []string{"admin", "ops"}, n.Approvers)
	require.False(t, b.ops.NoticeApproval(as(operator), store.ActionAcknowledge, 2).Needed, "within the threshold")

	// The operator's replay waits: the admin may approve it.
	_, err = b.ops.StartReplay(ctx, as(operator), ops.ReplayRequest{Request: replay.Request{Filter: all}, Confirm: true})
	a := pendingOf(t, err)
	require.Equal(t, int64(6), a.Count)

	// Without the configuration, nothing is refused (and nobody named).
	open := newOps(t)
	_, err = open.ops.Delete(ctx, as(admin), ops.ActionRequest{Filter: all, Confirm: true})
	pendingOf(t, err)
	require.Nil(t, open.ops.NoticeApproval(as(admin), store.ActionDelete, 6).Approvers)
}

// Withdraw: its requester only, while it waits; audited; nothing runs.
// Who may decide: not the requester, not a viewer, not a token that does
// not see every queue of the request; the navigation's count follows.
func TestApprovalWithdrawAndWhoMayDecide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator, ordersOps, viewer)
	_, err := b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: &store.Filter{}, Confirm: true})
	a := pendingOf(t, err)

	require.True(t, ops.MayDecide(admin, a))
	require.False(t, ops.MayDecide(operator, a), "the requester")
	require.False(t, ops.MayDecide(ordersOps, a), "an unscoped request is not within orders")
	require.False(t, ops.MayDecide(viewer, a))
	require.True(t, ops.MayWithdraw(operator, a))
	require.False(t, ops.MayWithdraw(admin, a))
	for p, want := range map[*auth.Principal]int{&admin: 1, &operator: 0, &ordersOps: 0, &viewer: 0} {
		n, err := b.ops.PendingForMe(ctx, as(*p))
		require.NoError(t, err)
		require.Equal(t, want, n, p.Name)
	}
	views, err := b.ops.ApprovalViews(ctx, as(admin), 10)
	require.NoError(t, err)
	require.Len(t, views, 1)
	require.True(t, views[0].MayDecide)
	require.False(t, views[0].MayWithdraw)
	require.Equal(t, []string{"admin"}, views[0].Approvers)
	require.Len(t, views[0].Sample, 5, "a sample of the snapshot of 6")

	_, err = b.ops.Withdraw(ctx, as(admin), a.ID)
	require.ErrorIs(t, err, ops.ErrForbidden, "only the requester withdraws")
	w, err := b.ops.Withdraw(ctx, as(operator), a.ID)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalWithdrawn, w.Status)
	_, err = b.ops.Withdraw(ctx, as(operator), a.ID)
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = b.ops.Approve(ctx, as(admin), a.ID)
	require.ErrorIs(t, err, store.ErrConflict, "a withdrawn request cannot be approved")
	n, err := b.ops.PendingForMe(ctx, as(admin))
	require.NoError(t, err)
	require.Zero(t, n)
	page, err := b.ops.ListMessages(ctx, as(admin), ops.ListRequest{Filter: store.Filter{}})
	require.NoError(t, err)
	require.Len(t, page.Messages, 6, "nothing acknowledged")
	audit, err := b.ops.Audit(ctx, as(admin), ops.AuditRequest{Action: store.ActionApprovalWithdraw})
	require.NoError(t, err)
	require.Len(t, audit.Entries, 1)
	require.Equal(t, "ops", audit.Entries[0].Actor)
}

// A group replay that went through approval names its requester as
// requester and its approver as approver, on the task and on its audit
// row, which records the group as it was asked for.
func TestApprovedReplayNamesRequesterAndApprover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator)
	groups, err := b.ops.Groups(ctx, as(admin), store.GroupQuery{SourceQueue: "orders"})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	g := groups[0].ID
	_, err = b.ops.StartReplay(ctx, as(operator), ops.ReplayRequest{Request: replay.Request{Filter: &store.Filter{Group: g}, DelaySeconds: 3600}, Confirm: true})
	a := pendingOf(t, err)
	views, err := b.ops.ApprovalViews(ctx, as(admin), 10)
	require.NoError(t, err)
	require.NotNil(t, views[0].Selection.Group, "the group is named")
	require.Equal(t, "Declined", views[0].Selection.Group.FailureType)

	done, err := b.ops.Approve(ctx, as(admin), a.ID)
	require.NoError(t, err)
	var res struct {
		TaskID int64 `json:"task_id"`
	}
	require.NoError(t, json.Unmarshal(done.Result, &res))
	task, err := b.ops.GetReplay(ctx, as(admin), res.TaskID)
	require.NoError(t, err)
	require.Equal(t, "ops", task.CreatedBy, "the requester")
	require.Equal(t, "admin", task.ApprovedBy)
	require.Equal(t, a.ID, task.ApprovalID)
	require.Equal(t, g, task.Request.Filter.Group, "the selection as asked")
	require.Equal(t, int64(3), task.Requested)
	require.Empty(t, task.Outcome, "not finished")

	page, err := b.ops.Audit(ctx, as(admin), ops.AuditRequest{Action: "replay"})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	e := page.Entries[0]
	require.Equal(t, "ops", e.Actor)
	require.Equal(t, "admin", e.ApprovedBy)
	var sel struct {
		Filter store.Filter `json:"filter"`
	}
	require.NoError(t, json.Unmarshal(e.Selection, &sel))
	require.Equal(t, g, sel.Filter.Group, "the group, not {\"status\":\"all\"}: %s", e.Selection)
}

// Who reads which audit rows: admins and unscoped operators every row; a
// token with queues the rows of its queues; viewers none. A filter on a
// replay task or an approval request hidden from the caller is not found.
func TestAuditVisibility(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t)
	for _, q := range []string{"orders", "billing"} {
		_, err := b.ops.Acknowledge(ctx, as(admin), ops.ActionRequest{Filter: &store.Filter{SourceQueue: q}, Limit: 1, Confirm: true})
		require.NoError(t, err)
	}
	actions := func(p auth.Principal) []string {
		t.Helper()
		page, err := b.ops.Audit(ctx, as(p), ops.AuditRequest{})
		require.NoError(t, err)
		var out []string
		for _, e := range page.Entries {
			out = append(out, string(e.Selection))
		}
		return out
	}
	require.Len(t, actions(admin), 2)
	require.Len(t, actions(operator), 2, "an unscoped operator's queues are every queue")
	got := actions(ordersOps)
	require.Len(t, got, 1)
	require.JSONEq(t, `{"source_queue":"orders"}`, got[0])
	_, err := b.ops.Audit(ctx, as(viewer), ops.AuditRequest{})
	require.ErrorIs(t, err, ops.ErrForbidden)

	task, err := b.ops.StartReplay(ctx, as(admin), ops.ReplayRequest{Request: replay.Request{Filter: &store.Filter{}, Limit: 2, DelaySeconds: 3600}})
	require.NoError(t, err)
	_, err = b.ops.ListMessages(ctx, as(ordersOps), ops.ListRequest{Filter: store.Filter{ReplayTask: task.ID, Status: "all"}})
	require.ErrorIs(t, err, store.ErrNotFound, "a task the scoped token does not see")
	page, err := b.ops.ListMessages(ctx, as(admin), ops.ListRequest{Filter: store.Filter{ReplayTask: task.ID, Status: "all"}})
	require.NoError(t, err)
	require.Len(t, page.Messages, 2)
}

// An approval's snapshot holds what the action changes: an acknowledge of
// every status leaves out the messages already acknowledged, in its count
// and within its limit, as the same action run at once does. (The snapshot
// once took the filter alone: approving then changed fewer messages than
// were counted, and other ones than the dry run named.)
func TestApprovalSnapshotIsWhatTheActionChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator)
	done, err := b.ops.Acknowledge(ctx, as(admin), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, int64(2), done.Changed, "within the threshold: at once")

	all := &store.Filter{Status: "all"}
	_, err = b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: all, Confirm: true})
	require.Equal(t, int64(4), pendingOf(t, err).Count, "6 match, 2 are acknowledged already")

	dry, err := b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: all, Limit: 3, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, int64(3), dry.Matched)
	_, err = b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: all, Limit: 3, Confirm: true})
	a := pendingOf(t, err)
	require.Equal(t, int64(3), a.Count)
	approved, err := b.ops.Approve(ctx, as(admin), a.ID)
	require.NoError(t, err)
	var res store.ActionResult
	require.NoError(t, json.Unmarshal(approved.Result, &res))
	require.Equal(t, int64(3), res.Changed, "the approved action changes what was counted: %s", approved.Result)
	page, err := b.ops.ListMessages(ctx, as(admin), ops.ListRequest{Filter: store.Filter{Status: store.StatusPending}})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1, "of 6, 2 at once and 3 approved")

	// By ids: 3 named, 2 of them acknowledged already, 1 to change: within
	// the threshold, so at once.
	acked, err := b.ops.ListMessages(ctx, as(admin), ops.ListRequest{Filter: store.Filter{Status: store.StatusAcknowledged}})
	require.NoError(t, err)
	ids := []int64{acked.Messages[0].ID, acked.Messages[1].ID, page.Messages[0].ID}
	res, err = b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{IDs: ids})
	require.NoError(t, err, "1 changes: no approval needed")
	require.Equal(t, int64(1), res.Changed)
	require.Equal(t, int64(2), res.Unchanged)
}

// Acknowledge and delete take a limit for a filter only: with ids it is
// refused (it was ignored, and every id acted on), saying what to send.
func TestActionLimitWithIDsIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t)
	for _, r := range []ops.ActionRequest{
		{IDs: []int64{1, 2, 3}, Limit: 1},
		{Filter: &store.Filter{IDs: []int64{1, 2, 3}}, Limit: 1, DryRun: true},
	} {
		_, err := b.ops.Acknowledge(ctx, as(admin), r)
		require.Equal(t, ops.CodeInvalid, ops.Classify(err), "%+v", r)
		require.Equal(t, "limit: caps a selection by filter; with ids, send only the ids to act on", ops.Message(err))
		_, err = b.ops.Delete(ctx, as(admin), r)
		require.Equal(t, ops.CodeInvalid, ops.Classify(err), "%+v", r)
	}
}
