package doors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// approvalAbove is the threshold of the approval test: the fixture's 8
// messages of a queue are above it.
const approvalAbove = 5

// lastApproval is the id of the newest request.
func (f *fixture) lastApproval(t *testing.T) int64 {
	t.Helper()
	list, err := f.ops.ListApprovals(context.Background(), caller("admin"), 1)
	require.NoError(t, err)
	require.NotEmpty(t, list)
	return list[0].ID
}

// pendingCount is how many messages of queue are pending.
func (f *fixture) pendingCount(t *testing.T, queue string) int64 {
	t.Helper()
	v, err := f.ops.Status(context.Background(), caller("admin"))
	require.NoError(t, err)
	for _, q := range v.Queues {
		if q.SourceQueue == queue {
			return q.Counts.Pending
		}
	}
	return 0
}

// expire moves a request's expiry into the past, as time would.
func (f *fixture) expire(t *testing.T, id int64) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), f.dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), `UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
}

// Four-eyes approval behaves the same through the HTTP API and the
// control queue: a bulk action above the threshold waits; the requester,
// a viewer, a token that cannot see it and a token without the action's
// role cannot decide it; an approval runs exactly the snapshot, although
// 1,000 more messages arrived meanwhile; an expired request cannot be
// approved; a rejected one runs nothing.
func TestApprovalThroughEveryDoor(t *testing.T) {
	t.Parallel()
	tweak := func(c *ops.Config) { c.ApprovalAbove, c.ConfirmAbove = approvalAbove, 0 }
	doors := []door{newHTTPDoor(t, tweak), newControlDoor(t, tweak)}
	ack := func(*fixture) request {
		return request{action: "acknowledge", filter: &store.Filter{SourceQueue: "orders"}}
	}
	decide := func(action string) func(*fixture) request {
		return func(f *fixture) request { return request{action: action, id: f.lastApproval(t)} }
	}
	type step struct {
		who    string
		req    func(*fixture) request
		expect outcome
		// after runs on each door's fixture once the step is done there.
		after func(f *fixture)
	}
	steps := []step{
		// Within the threshold: runs at once.
		{who: "op", req: func(f *fixture) request { return request{action: "acknowledge", ids: []int64{f.billing(7)}} },
			expect: outcome{Code: "ok", Matched: 1, Changed: 1}},
		// Above it: a request, with its snapshot of 8; then 1,000 more
		// orders messages arrive.
		{who: "op", req: ack, expect: outcome{Code: ops.CodeApprovalPending, Status: store.ApprovalPending, Count: 8},
			after: func(f *fixture) { f.deadLetters(t, "orders", 1000) }},
		{who: "viewer", req: func(*fixture) request { return request{action: "list_approvals"} }, expect: outcome{Code: "ok", Count: 1}},
		{who: "orders-ops", req: func(*fixture) request { return request{action: "list_approvals"} }, expect: outcome{Code: "ok", Count: 0}},
		{who: "op", req: decide("approve"), expect: outcome{Code: ops.CodeForbidden}},
		{who: "viewer", req: decide("approve"), expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: decide("approve"), expect: outcome{Code: ops.CodeNotFound}},
		{who: "admin", req: decide("approve"), expect: outcome{Code: "ok", Status: store.ApprovalApproved, Count: 8},
			after: func(f *fixture) {
				require.Equal(t, int64(1000), f.pendingCount(t, "orders"), "exactly the snapshot was acknowledged")
			}},
		{who: "admin-2", req: decide("approve"), expect: outcome{Code: ops.CodeConflict}},
		// A delete needs an admin to approve it, and a rejected one runs
		// nothing.
		{who: "admin", req: func(*fixture) request {
			return request{action: "delete", filter: &store.Filter{SourceQueue: "billing"}}
		},
			expect: outcome{Code: ops.CodeApprovalPending, Status: store.ApprovalPending, Count: 7}},
		{who: "op", req: decide("approve"), expect: outcome{Code: ops.CodeForbidden}},
		{who: "admin", req: decide("reject"), expect: outcome{Code: ops.CodeForbidden}},
		{who: "admin-2", req: decide("reject"), expect: outcome{Code: "ok", Status: store.ApprovalRejected, Count: 7},
			after: func(f *fixture) { require.Equal(t, int64(7), f.pendingCount(t, "billing"), "nothing deleted") }},
		// Its requester withdraws a request: nobody else may, and it is
		// no longer pending.
		{who: "op", req: func(*fixture) request {
			return request{action: "replay", filter: &store.Filter{SourceQueue: "billing"}}
		},
			expect: outcome{Code: ops.CodeApprovalPending, Status: store.ApprovalPending, Count: 7}},
		{who: "admin", req: decide("withdraw"), expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: decide("withdraw"), expect: outcome{Code: ops.CodeNotFound}},
		{who: "op", req: decide("withdraw"), expect: outcome{Code: "ok", Status: store.ApprovalWithdrawn, Count: 7},
			after: func(f *fixture) { require.Equal(t, int64(7), f.pendingCount(t, "billing"), "nothing replayed") }},
		{who: "op", req: decide("withdraw"), expect: outcome{Code: ops.CodeConflict}},
		{who: "admin", req: decide("approve"), expect: outcome{Code: ops.CodeConflict}},
		// An expired request cannot be approved.
		{who: "op", req: func(*fixture) request {
			return request{action: "replay", filter: &store.Filter{SourceQueue: "billing"}}
		},
			expect: outcome{Code: ops.CodeApprovalPending, Status: store.ApprovalPending, Count: 7},
			after:  func(f *fixture) { f.expire(t, f.lastApproval(t)) }},
		{who: "admin", req: decide("approve"), expect: outcome{Code: ops.CodeConflict}},
		// A replay approved: the task holds the snapshot.
		{who: "op", req: func(*fixture) request {
			return request{action: "replay", filter: &store.Filter{SourceQueue: "billing"}}
		},
			expect: outcome{Code: ops.CodeApprovalPending, Status: store.ApprovalPending, Count: 7},
			after:  func(f *fixture) { f.deadLetters(t, "billing", 1000) }},
		{who: "orders-ops", req: decide("approve"), expect: outcome{Code: ops.CodeNotFound}},
		{who: "admin", req: decide("approve"), expect: outcome{Code: "ok", Status: store.ApprovalApproved, Count: 7},
			after: func(f *fixture) {
				a, err := f.ops.GetApproval(context.Background(), caller("admin"), f.lastApproval(t))
				require.NoError(t, err)
				var res struct {
					TaskID int64 `json:"task_id"`
				}
				require.NoError(t, jsonUnmarshal(a.Result, &res))
				task, err := f.replays.Get(context.Background(), res.TaskID)
				require.NoError(t, err)
				require.Equal(t, int64(7), task.Requested, "the task holds the snapshot, not the 1,000 that came later")
				require.Equal(t, replay.StatusScheduled, task.Status)
			}},
	}
	for i, s := range steps {
		var got [2]outcome
		for j, d := range doors {
			reqID := fmt.Sprintf("approval-step-%d-%s", i, d.name())
			got[j] = d.do(t, s.who, reqID, s.req(d.fixture()))
			if s.after != nil {
				s.after(d.fixture())
			}
		}
		require.Equal(t, got[0], got[1], "step %d (%s): the doors disagree", i, s.who)
		require.Equal(t, s.expect, got[0], "step %d (%s)", i, s.who)
	}
	// Every step of a request is audited: made, approved, rejected.
	for _, d := range doors {
		page, err := d.fixture().ops.Audit(context.Background(), caller("admin"), ops.AuditRequest{Limit: 1000})
		require.NoError(t, err)
		n := map[string]int{}
		for _, e := range page.Entries {
			n[e.Action]++
		}
		require.Equal(t, 5, n[store.ActionApprovalRequest], d.name())
		require.Equal(t, 2, n[store.ActionApprove], d.name())
		require.Equal(t, 1, n[store.ActionReject], d.name())
		require.Equal(t, 1, n[store.ActionApprovalWithdraw], d.name())
	}
}

// A request that no configured principal but its requester could approve
// is refused at once by every door, and records nothing: here the only
// admin token asks to delete more than the threshold. One that another
// configured token may approve waits as before.
func TestUnapprovableRequestRefusedByEveryDoor(t *testing.T) {
	t.Parallel()
	tweak := oneAdminApprovals
	doors := []door{newHTTPDoor(t, tweak), newControlDoor(t, tweak)}
	steps := []struct {
		who    string
		req    request
		expect outcome
	}{
		{"admin", request{action: "delete", filter: &store.Filter{SourceQueue: "billing"}}, outcome{Code: ops.CodeForbidden}},
		{"admin", request{action: "delete", filter: &store.Filter{SourceQueue: "billing"}, limit: approvalAbove},
			outcome{Code: "ok", Matched: approvalAbove, Changed: approvalAbove}},
		{"op", request{action: "acknowledge", filter: &store.Filter{SourceQueue: "orders"}},
			outcome{Code: ops.CodeApprovalPending, Status: store.ApprovalPending, Count: 8}},
	}
	for i, s := range steps {
		var got [2]outcome
		for j, d := range doors {
			reqID := fmt.Sprintf("unapprovable-%d-%s", i, d.name())
			got[j] = d.do(t, s.who, reqID, s.req)
			if s.expect.Code == ops.CodeForbidden {
				require.Zero(t, countAudit(t, d.fixture(), reqID), "step %d via %s: nothing audited", i, d.name())
			}
		}
		require.Equal(t, got[0], got[1], "step %d: the doors disagree", i)
		require.Equal(t, s.expect, got[0], "step %d", i)
	}
	for _, d := range doors {
		list, err := d.fixture().ops.ListApprovals(context.Background(), caller("admin"), 10)
		require.NoError(t, err)
		require.Len(t, list, 1, "%s: only the acknowledge was recorded", d.name())
	}
}

// A dry run says, through every door, whether the real action would wait
// for approval and who may give it: none when the only token that may
// approve is the requester's own (the real request would be refused).
func TestDryRunApprovalThroughEveryDoor(t *testing.T) {
	t.Parallel()
	tweak := oneAdminApprovals
	doors := []door{newHTTPDoor(t, tweak), newControlDoor(t, tweak)}
	steps := []struct {
		who    string
		req    func(*fixture) request
		expect outcome
	}{
		{"op", func(*fixture) request {
			return request{action: "acknowledge", filter: &store.Filter{SourceQueue: "orders"}, dryRun: true}
		}, outcome{Code: "ok", Matched: 8, ApprovalRequired: required(true), Approvers: []string{"admin"}}},
		{"op", func(*fixture) request {
			return request{action: "replay", filter: &store.Filter{SourceQueue: "billing"}, dryRun: true}
		}, outcome{Code: "ok", Status: "dry_run", Requested: 8, ApprovalRequired: required(true), Approvers: []string{"admin"}}},
		{"admin", func(*fixture) request {
			return request{action: "delete", filter: &store.Filter{SourceQueue: "billing"}, dryRun: true}
		}, outcome{Code: "ok", Matched: 8, ApprovalRequired: required(true)}},
		{"admin", func(*fixture) request {
			return request{action: "delete", filter: &store.Filter{SourceQueue: "billing"}, limit: approvalAbove, dryRun: true}
		}, outcome{Code: "ok", Matched: approvalAbove, ApprovalRequired: required(false)}},
		{"op", func(f *fixture) request {
			return request{action: "replay", ids: []int64{f.billing(0)}, dryRun: true}
		}, outcome{Code: "ok", Status: "dry_run", Requested: 1, ApprovalRequired: required(false)}},
	}
	for i, s := range steps {
		var got [2]outcome
		for j, d := range doors {
			got[j] = d.do(t, s.who, fmt.Sprintf("dry-run-approval-%d-%s", i, d.name()), s.req(d.fixture()))
		}
		require.Equal(t, got[0], got[1], "step %d: the doors disagree", i)
		require.Equal(t, s.expect, got[0], "step %d", i)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// oneAdminApprovals configures approval above approvalAbove, no
// confirmation step, and every test token but admin-2: admin is then the
// only one who may approve an operator's request, and nobody an admin's.
func oneAdminApprovals(c *ops.Config) {
	c.ApprovalAbove, c.ConfirmAbove = approvalAbove, 0
	c.Principals = func() []auth.Principal {
		var out []auth.Principal
		for _, p := range authenticator().Principals() {
			if p.Name != "admin-2" {
				out = append(out, p)
			}
		}
		return out
	}
}
