package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// The errors of a task, counted by reason, and the filter that lists the
// messages of each reason (the console's "replay-error" links).
func TestReplayErrorsAndTheirMessages(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seedPending(t, st, db, "orders", 6)
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "tok", Lease: time.Minute, Limit: 10, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 6)
	const missing = `exchange "nowhere" does not exist`
	_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
		{ID: ids[0], Token: "tok", Result: store.OutcomePublished},
		{ID: ids[1], Token: "tok", Result: store.OutcomeFailed, Error: missing},
		{ID: ids[2], Token: "tok", Result: store.OutcomeFailed, Error: missing},
		{ID: ids[3], Token: "tok", Result: store.OutcomeFailed, Error: missing},
		{ID: ids[4], Token: "tok", Result: store.OutcomeFailed, Error: "unroutable"},
		{ID: ids[5], Token: "tok", Result: store.OutcomeUnknown, Error: "outcome unknown: connection lost"},
	}, false)
	require.NoError(t, err)

	reasons, rest, err := st.ReplayErrors(ctx, task.ID, 10)
	require.NoError(t, err)
	require.Zero(t, rest)
	require.Equal(t, []store.ReplayErrorCount{
		{Outcome: store.OutcomeFailed, Error: missing, Count: 3},
		{Outcome: store.OutcomeFailed, Error: "unroutable", Count: 1},
		{Outcome: store.OutcomeUnknown, Error: "outcome unknown: connection lost", Count: 1},
	}, reasons)
	reasons, rest, err = st.ReplayErrors(ctx, task.ID, 1)
	require.NoError(t, err)
	require.Len(t, reasons, 1)
	require.Equal(t, int64(2), rest, "the reasons left out are counted")

	list := func(f store.Filter) []int64 {
		t.Helper()
		f.Status = "all"
		page, err := st.ListMessages(ctx, f, store.ListOptions{Limit: 100})
		require.NoError(t, err)
		var out []int64
		for _, m := range page.Messages {
			out = append(out, m.ID)
		}
		return out
	}
	require.ElementsMatch(t, ids[1:4], list(store.Filter{ReplayTask: task.ID, ReplayOutcome: store.OutcomeFailed, ReplayError: missing}))
	require.ElementsMatch(t, ids[1:5], list(store.Filter{ReplayTask: task.ID, ReplayOutcome: store.OutcomeFailed}))
	require.ElementsMatch(t, []int64{ids[5]}, list(store.Filter{ReplayTask: task.ID, ReplayError: "outcome unknown: connection lost"}))
	require.ElementsMatch(t, ids, list(store.Filter{ReplayTask: task.ID}))
	require.Empty(t, list(store.Filter{ReplayTask: task.ID + 1}))

	for _, bad := range []store.Filter{
		{ReplayOutcome: store.OutcomeFailed}, {ReplayError: "x"}, {ReplayTask: task.ID, ReplayOutcome: "lost"},
		{ReplayTask: task.ID, ReplayOutcome: store.OutcomePublished, ReplayError: "x"}, {ReplayTask: -1},
	} {
		require.ErrorIs(t, bad.Validate(), store.ErrInvalidFilter, "%+v", bad)
	}
}

// A request approved by a second principal: the action's audit row names
// the requester as actor and the approver as approved_by, with the
// selection as asked; the task names both. A withdrawn request runs
// nothing and can be decided no more.
func TestApprovalActorsAndWithdraw(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	seedPending(t, st, db, "orders", 3)
	requester := store.Actor{Name: "alice", Role: "operator", Via: "console"}
	approver := store.Actor{Name: "bob", Role: "admin", Via: "api"}
	asked := map[string]any{"filter": map[string]string{"group": "00000000000000ab"}}

	newApproval := func(action string) store.Approval {
		t.Helper()
		a, err := st.CreateApproval(ctx, store.NewApproval{Action: action, Request: json.RawMessage(`{}`),
			Selection: store.Filter{SourceQueue: "orders"}, TTL: time.Hour, Actor: requester})
		require.NoError(t, err)
		return a
	}
	a := newApproval(store.ActionAcknowledge)
	_, err := st.Acknowledge(ctx, store.Filter{Approval: a.ID, Status: "all"}, requester,
		store.ActionOptions{Approval: a.ID, Approver: approver, Confirm: true, AuditSelection: asked})
	require.NoError(t, err)
	page, err := st.Audit(ctx, store.AuditQuery{Action: store.ActionAcknowledge})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	e := page.Entries[0]
	require.Equal(t, "alice", e.Actor)
	require.Equal(t, "bob", e.ApprovedBy)
	require.JSONEq(t, `{"filter":{"group":"00000000000000ab"}}`, string(e.Selection))
	page, err = st.Audit(ctx, store.AuditQuery{Action: store.ActionApprove})
	require.NoError(t, err)
	require.Equal(t, "bob", page.Entries[0].Actor, "the decision is the approver's")
	require.Empty(t, page.Entries[0].ApprovedBy)

	_, err = db.Exec(ctx, `UPDATE dead_messages SET status = 'pending', acknowledged_at = NULL`)
	require.NoError(t, err)
	r := newApproval("replay")
	task, err := st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{Approval: r.ID, Status: "all"},
		MaxItems: 100, Request: json.RawMessage(`{}`), Actor: requester, Approval: r.ID, Approver: approver, AuditSelection: asked,
		StartAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, "alice", task.CreatedBy)
	require.Equal(t, "bob", task.ApprovedBy)
	require.Equal(t, r.ID, task.ApprovalID)
	got, err := st.GetReplayTask(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, "bob", got.ApprovedBy)

	w := newApproval(store.ActionDelete)
	done, err := st.WithdrawApproval(ctx, w.ID, requester)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalWithdrawn, done.Status)
	require.Equal(t, "alice", done.DecidedBy)
	_, err = st.WithdrawApproval(ctx, w.ID, requester)
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = st.Delete(ctx, store.Filter{Approval: w.ID, Status: "all"}, requester, store.ActionOptions{Approval: w.ID, Approver: approver, Confirm: true})
	require.ErrorIs(t, err, store.ErrConflict, "a withdrawn request never runs")
	require.Equal(t, 3, count(t, db, "TRUE"), "nothing deleted")
	page, err = st.Audit(ctx, store.AuditQuery{Action: store.ActionApprovalWithdraw})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, "alice", page.Entries[0].Actor)
}

// The audit rows of one principal's queues: its own, those it approved,
// those recorded within its scope, and those whose selection names one of
// its queues; not the others.
func TestAuditWithin(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seed(t, st, db, []string{"orders", "billing"}, 2, timeoutFailure)
	unscoped := store.Actor{Name: "admin", Role: "admin", Via: "api"}
	acts := []struct {
		actor store.Actor
		f     store.Filter
		opt   store.ActionOptions
	}{
		{unscoped, store.Filter{SourceQueue: "orders"}, store.ActionOptions{}},                                                                             // names orders: visible
		{unscoped, store.Filter{SourceQueue: "billing"}, store.ActionOptions{}},                                                                            // billing: hidden
		{unscoped, store.Filter{IDs: []int64{ids[0]}}, store.ActionOptions{}},                                                                              // any queue: hidden
		{store.Actor{Name: "o2", Role: "operator", Via: "api", Scope: []string{"orders"}}, store.Filter{Scope: []string{"orders"}}, store.ActionOptions{}}, // scope inside: visible
		{store.Actor{Name: "me", Role: "operator", Via: "api"}, store.Filter{IDs: []int64{ids[3]}}, store.ActionOptions{}},                                 // my own: visible
	}
	for _, a := range acts {
		_, err := st.Acknowledge(ctx, a.f, a.actor, a.opt)
		require.NoError(t, err)
	}
	// An approved row whose approver is me.
	_, err := db.Exec(ctx, `INSERT INTO audit_log (actor, via, action, selection, approved_by) VALUES ('x', 'api', 'delete', '{"ids":[1]}', 'me')`)
	require.NoError(t, err)
	// A replay's selection holds its filter under "filter".
	_, err = db.Exec(ctx, `INSERT INTO audit_log (actor, via, action, selection) VALUES ('x', 'api', 'replay', '{"filter":{"source_queue":"orders"},"limit":0}'),
		('x', 'api', 'replay', '{"filter":{"source_queue":"billing"}}'), ('x', 'api', 'replay', '"odd"'), ('x', 'api', 'replay', '[1]')`)
	require.NoError(t, err)

	page, err := st.Audit(ctx, store.AuditQuery{Within: &store.AuditWithin{Name: "me", Queues: []string{"orders"}}})
	require.NoError(t, err)
	var got []string
	for _, e := range page.Entries {
		got = append(got, e.Actor+" "+e.Action+" "+string(e.Selection))
	}
	require.Len(t, got, 5, "%v", got)
	all, err := st.Audit(ctx, store.AuditQuery{})
	require.NoError(t, err)
	require.Len(t, all.Entries, 10)
}
