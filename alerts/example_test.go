package alerts_test

import (
	"fmt"
	"time"

	"github.com/dlq/dlq/alerts"
)

// The caller keeps the State between evaluations (in PostgreSQL) and sends
// what Evaluate returns; here three evaluations a minute apart.
func ExampleEvaluate() {
	rs := alerts.DefaultRuleSet()
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var state alerts.State
	for i, pending := range []int64{150, 180, 20} {
		snap := alerts.Snapshot{
			At:     start.Add(time.Duration(i) * time.Minute),
			Queues: []alerts.QueueStats{{SourceQueue: "orders", Pending: pending}},
		}
		var notes []alerts.Alert
		state, notes = alerts.Evaluate(state, snap, rs)
		for _, a := range notes {
			fmt.Printf("%s %s %s: %s\n", snap.At.Format("15:04"), a.Status, a.Rule, a.Annotations["summary"])
		}
	}
	for _, v := range state.View() {
		fmt.Printf("%s/%s is %s since %s\n", v.Rule, v.SourceQueue, v.State, v.Since.Format("15:04"))
	}
	// Output:
	// 12:00 firing pending_count: 150 dead messages pending from "orders"
	// 12:02 resolved pending_count: Pending dead messages back to normal for source queue "orders"
	// depth_nonzero/orders is pending since 12:00
	// pending_count/orders is resolved since 12:02
}
