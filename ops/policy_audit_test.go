package ops_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// A policy configured with queues: [] acts on every queue: its audit rows
// (an attempt's replay, the parking of what it exhausted) are recorded
// unscoped, and an operator scoped to orders does not read them. Nor does
// it read a row an older dlq recorded with the empty scope. An unscoped
// operator reads them all.
func TestEveryQueuePolicyAuditIsNotScoped(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newOps(t)
	lease := dlqtest.Lease(t, b.st, "policies")
	sel := store.PolicySelection{Name: "everywhere", Queues: []string{}, Categories: []string{"transient", "permanent", "unknown"},
		BackoffFactor: 1, MaxAttempts: 1}
	res, err := b.st.StartPolicyAttempt(ctx, lease, store.PolicyAttempt{Selection: sel, Limit: 10, Request: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NotNil(t, res.Task)
	require.EqualValues(t, 6, res.Attempts[1], "every queue's messages")
	db := dlqtest.DB(t, b.dsn)
	_, err = db.Exec(ctx, `UPDATE replay_tasks SET status = 'completed', finished_at = now() WHERE id = $1`, res.Task.ID)
	require.NoError(t, err)
	parked, err := b.st.ParkExhausted(ctx, lease, sel)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"orders": 3, "billing": 3}, parked)
	_, err = db.Exec(ctx, `INSERT INTO audit_log (actor, role, via, action, selection, scope)
VALUES ('policy:older', 'operator', 'policy', 'policy_park', '{"policy":"older"}', '{}')`)
	require.NoError(t, err)

	all, err := b.ops.Audit(ctx, as(operator), ops.AuditRequest{})
	require.NoError(t, err)
	require.Len(t, all.Entries, 3)
	for _, e := range all.Entries[1:] {
		require.Nil(t, e.Scope, "%s %s: recorded for every queue", e.Actor, e.Action)
	}
	within, err := b.ops.Audit(ctx, as(ordersOps), ops.AuditRequest{})
	require.NoError(t, err)
	require.Empty(t, within.Entries)
}
