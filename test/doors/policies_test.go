package doors_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/ops"
)

// withPolicies gives the doors' operations layer a cron service (its jobs
// off) with two policies: orders-retry (queue orders) and everywhere.
func withPolicies(t *testing.T) func(*ops.Config) {
	return func(c *ops.Config) {
		policy := func(name string, queues ...string) cron.Policy {
			return cron.Policy{Name: name, Queues: queues, Categories: []string{"transient"}, FirstDelay: time.Minute,
				BackoffFactor: 2, MaxDelay: time.Hour, MaxAttempts: 3}
		}
		svc, err := cron.New(cron.Config{
			Store: c.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(),
			Schedules: cron.Only(cron.Schedules{}),
			Policies:  cron.PoliciesConfig{Policies: []cron.Policy{policy("orders-retry", "orders"), policy("everywhere")}},
		})
		require.NoError(t, err)
		c.Cron = svc
	}
}

// TestPoliciesThroughEveryDoor: listing, pausing and resuming the
// automatic replay policies answer alike through the HTTP API and the
// control queue: the role, the queue scope (a scoped token sees and
// pauses only policies of its queues), one audit row per change.
func TestPoliciesThroughEveryDoor(t *testing.T) {
	t.Parallel()
	pol := func(action, name string) func(*fixture) request {
		return func(*fixture) request { return request{action: action, name: name} }
	}
	list := func(*fixture) request { return request{action: "list_policies"} }
	rows := []row{
		{who: "viewer", req: list, expect: outcome{Code: "ok", Policies: []string{"orders-retry", "everywhere"}}},
		{who: "orders-ops", req: list, expect: outcome{Code: "ok", Policies: []string{"orders-retry"}}},
		{who: "viewer", req: pol("pause_policy", "orders-retry"), expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: pol("pause_policy", "everywhere"), expect: outcome{Code: ops.CodeNotFound}},
		{who: "orders-ops", req: pol("pause_policy", "orders-retry"), expect: outcome{Code: "ok", Status: "paused"}, mutates: true},
		{who: "op", req: pol("resume_policy", "orders-retry"), expect: outcome{Code: "ok", Status: "active"}, mutates: true},
		{who: "op", req: pol("pause_policy", "no-such-policy"), expect: outcome{Code: ops.CodeNotFound}},
		{who: "admin", req: pol("pause_policy", "everywhere"), expect: outcome{Code: "ok", Status: "paused"}, mutates: true},
	}
	httpDoor := newHTTPDoor(t, withPolicies(t))
	controlDoor := newControlDoor(t, withPolicies(t))
	for i, r := range rows {
		var got [2]outcome
		for j, d := range []door{httpDoor, controlDoor} {
			reqID := fmt.Sprintf("policy-row-%d-%s", i, d.name())
			got[j] = d.do(t, r.who, reqID, r.req(d.fixture()))
			audits := countAudit(t, d.fixture(), reqID)
			if r.mutates && got[j].Code == "ok" {
				require.Equal(t, 1, audits, "row %d via %s: one audit row", i, d.name())
			} else {
				require.Zero(t, audits, "row %d via %s: no audit row", i, d.name())
			}
		}
		require.Equal(t, got[0], got[1], "row %d (%s %s): the doors disagree", i, r.who, r.req(httpDoor.fixture()).action)
		require.Equal(t, r.expect, got[0], "row %d (%s %s)", i, r.who, r.req(httpDoor.fixture()).action)
	}
}
