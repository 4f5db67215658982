package ops_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// An alert about a policy or an approval request has no source queue: a
// token scoped to orders sees those of the policies and requests it may
// see, not billing's, and the store-wide ones (capacity); an unscoped
// token sees them all.
func TestScopedAlertsOfPoliciesAndApprovals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newOps(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	policy := func(name string, queues ...string) cron.Policy {
		return cron.Policy{Name: name, Queues: queues, Categories: []string{"transient"}, FirstDelay: time.Minute,
			BackoffFactor: 5, MaxDelay: time.Hour, MaxAttempts: 3}
	}
	cr, err := cron.New(cron.Config{Store: b.st, Logger: log, Registerer: prometheus.NewRegistry(), Instance: "ops-test",
		Schedules: cron.Only(cron.Schedules{}), Policies: cron.PoliciesConfig{Policies: []cron.Policy{
			policy("orders-retry", "orders"), policy("billing-retry", "billing"), policy("everywhere")}}})
	require.NoError(t, err)
	o, err := ops.New(ops.Config{Store: b.st, Cron: cr, Logger: log})
	require.NoError(t, err)

	approval := func(queue string, by store.Actor) int64 {
		a, err := b.st.CreateApproval(ctx, store.NewApproval{Action: store.ActionAcknowledge, Request: []byte(`{}`),
			Selection: store.Filter{SourceQueue: queue, Scope: by.Scope}, TTL: time.Hour, Actor: by})
		require.NoError(t, err)
		return a.ID
	}
	ordersReq := approval("orders", store.Actor{Name: "another-orders-op", Role: "operator", Via: "api", Scope: []string{"orders"}})
	billingReq := approval("billing", store.Actor{Name: "admin", Role: "admin", Via: "api"})

	rs := alerts.RuleSet{Rules: []alerts.Rule{
		{Name: "policy_paused", Kind: alerts.KindPolicyPaused, Severity: alerts.SeverityWarning},
		{Name: "approval_pending", Kind: alerts.KindApprovalPending, Severity: alerts.SeverityWarning},
		{Name: "capacity", Kind: alerts.KindCapacity, Threshold: 90, Severity: alerts.SeverityCritical},
	}}
	require.NoError(t, rs.Validate())
	state, _ := alerts.Evaluate(alerts.State{}, alerts.Snapshot{At: time.Now(),
		Capacity: alerts.CapacityStats{Messages: 10, MaxMessages: 10},
		Policies: []alerts.PolicyStats{{Name: "orders-retry", Paused: true}, {Name: "billing-retry", Paused: true}, {Name: "everywhere", Paused: true}},
		Approvals: []alerts.ApprovalStats{{ID: ordersReq, Action: "acknowledge", Count: 3}, {ID: billingReq, Action: "acknowledge", Count: 3},
			{ID: 999999, Action: "acknowledge", Count: 1}},
	}, rs)
	raw, err := json.Marshal(state)
	require.NoError(t, err)
	require.NoError(t, b.st.SaveAlertState(ctx, dlqtest.Lease(t, b.st, "alerts"), raw))

	seen := func(c ops.Caller) []string {
		v, err := o.Alerts(ctx, c)
		require.NoError(t, err)
		var out []string
		for _, a := range v.Alerts {
			out = append(out, string(a.Kind)+" "+a.Subject)
		}
		slices.Sort(out)
		return out
	}
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	require.Equal(t, []string{"approval_pending " + id(ordersReq), "capacity ", "policy_paused orders-retry"}, seen(as(ordersOps)))
	require.Equal(t, []string{"approval_pending " + id(ordersReq), "approval_pending " + id(billingReq), "approval_pending 999999",
		"capacity ", "policy_paused billing-retry", "policy_paused everywhere", "policy_paused orders-retry"}, seen(as(operator)))
}
