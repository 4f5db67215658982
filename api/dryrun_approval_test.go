package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
)

// setupPrincipals are the principals setup's tokens authenticate as: the
// layer names who may approve from them, as dlq serve configures it.
func setupPrincipals() []auth.Principal {
	return []auth.Principal{
		{Name: "admin", Role: auth.RoleAdmin, Bodies: true},
		{Name: "ops", Role: auth.RoleOperator, Bodies: true},
		{Name: "orders-ops", Role: auth.RoleOperator, Queues: []string{scopedQueue}, Bodies: true},
		{Name: "viewer", Role: auth.RoleViewer},
		{Name: "viewer-bodies", Role: auth.RoleViewer, Bodies: true},
	}
}

// dryRunApproval is what a dry run's answer says of approval.
type dryRunApproval struct {
	DryRun           bool     `json:"dry_run"`
	ApprovalRequired *bool    `json:"approval_required"`
	Approvers        []string `json:"approvers"`
	ApprovalNote     string   `json:"approval_note"`
	// The answer's existing fields stay as they were.
	Matched   *int64 `json:"matched"`
	Remaining *int64 `json:"remaining"`
}

// A dry run of a replay, acknowledge or delete says whether the real
// action would wait for approval, who may approve it, or that nobody
// configured may and the real request would be refused; and the real
// requests then do what their dry runs said.
func TestDryRunSaysWhetherApprovalIsNeeded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.realReplayer, o.confirmAbove = true, 0
		o.ops = func(c *ops.Config) { c.ApprovalAbove, c.Principals = 3, setupPrincipals }
	})
	b.seed(t, many("orders", 5)...)
	b.seed(t, many("billing", 2)...)

	dry := func(path, token, queue string) dryRunApproval {
		t.Helper()
		r := b.do(t, "POST", path, token, map[string]any{"filter": map[string]any{"source_queue": queue}, "dry_run": true})
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var a dryRunApproval
		r.json(t, &a)
		require.True(t, a.DryRun, "%s", r.body)
		require.NotNil(t, a.ApprovalRequired, "a dry run says whether approval is needed: %s", r.body)
		return a
	}

	// 5 orders messages, above 3: an operator's acknowledge or replay
	// waits for the admin.
	for _, path := range []string{"/api/v1/messages/acknowledge", "/api/v1/replays"} {
		a := dry(path, tokOp, "orders")
		require.True(t, *a.ApprovalRequired, path)
		require.Equal(t, []string{"admin"}, a.Approvers, path)
		require.Contains(t, a.ApprovalNote, "needed: the ", path)
		require.Contains(t, a.ApprovalNote, "of 5 messages selects more than api.approval_above (3)", path)
		require.Contains(t, a.ApprovalNote, "waits for admin to approve it", path)
	}
	require.Equal(t, int64(5), *dry("/api/v1/messages/acknowledge", tokOp, "orders").Matched, "matched is as before")
	require.Equal(t, int64(5), *dry("/api/v1/replays", tokOp, "orders").Remaining, "remaining is as before")

	// The admin's delete of them: only an admin may approve a delete, and
	// the only one is its requester, so the real delete would be refused.
	a := dry("/api/v1/messages/delete", tokAdmin, "orders")
	require.True(t, *a.ApprovalRequired)
	require.Empty(t, a.Approvers)
	require.Contains(t, a.ApprovalNote, "no configured token but admin may approve it")
	require.Contains(t, a.ApprovalNote, "the real request would be refused")

	// 2 billing messages, within 3: no approval.
	for _, c := range []struct{ path, token string }{
		{"/api/v1/messages/acknowledge", tokOp}, {"/api/v1/replays", tokOp}, {"/api/v1/messages/delete", tokAdmin},
	} {
		a := dry(c.path, c.token, "billing")
		require.False(t, *a.ApprovalRequired, c.path)
		require.Empty(t, a.Approvers, c.path)
		require.Contains(t, a.ApprovalNote, "not needed: the ", c.path)
		require.Contains(t, a.ApprovalNote, "of 2 messages is within api.approval_above (3)", c.path)
	}

	// The real requests do what their dry runs said.
	body := func(queue string) map[string]any {
		return map[string]any{"filter": map[string]any{"source_queue": queue}}
	}
	r := b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, body("orders"))
	require.Equal(t, http.StatusAccepted, r.status, "waits for approval: %s", r.body)
	r = b.do(t, "POST", "/api/v1/messages/delete", tokAdmin, body("orders"))
	require.Equal(t, http.StatusForbidden, r.status, "refused: %s", r.body)
	var refused struct{ Error struct{ Code, Reason string } }
	r.json(t, &refused)
	require.Equal(t, "forbidden", refused.Error.Code, "the documented code: %s", r.body)
	require.Equal(t, "no_approver", refused.Error.Reason, "told from a refused token: %s", r.body)
	r = b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, body("billing"))
	require.Equal(t, http.StatusOK, r.status, "runs at once: %s", r.body)
	var res struct {
		Changed          int64 `json:"changed"`
		ApprovalRequired *bool `json:"approval_required"`
	}
	r.json(t, &res)
	require.Equal(t, int64(2), res.Changed)
	require.Nil(t, res.ApprovalRequired, "only a dry run's answer says it: %s", r.body)
}

// Without approval_above, a dry run says approval is off.
func TestDryRunSaysApprovalIsOff(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.confirmAbove = 0 })
	b.seed(t, many("orders", 5)...)
	r := b.do(t, "POST", "/api/v1/messages/delete", tokAdmin,
		map[string]any{"filter": map[string]any{"source_queue": "orders"}, "dry_run": true})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var a dryRunApproval
	r.json(t, &a)
	require.NotNil(t, a.ApprovalRequired, "%s", r.body)
	require.False(t, *a.ApprovalRequired)
	require.Contains(t, a.ApprovalNote, "four-eyes approval is off")
}
