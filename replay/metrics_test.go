package replay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
)

// taskGauges reads dlq_replay_task_messages of one task, by state; nil
// when the task has no series.
func taskGauges(t *testing.T, reg *prometheus.Registry, task int64) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out map[string]float64
	for _, mf := range mfs {
		if mf.GetName() != "dlq_replay_task_messages" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["task"] == strconv.FormatInt(task, 10) {
				if out == nil {
					out = map[string]float64{}
				}
				out[labels["state"]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// A finished task's progress gauges keep its final values for the
// retention (15 minutes by default; here 2 s), so that a scrape sees how it
// ended, and are then removed.
func TestReplayProgressGaugesOutliveTheTask(t *testing.T) {
	t.Parallel()
	const retention = 2 * time.Second
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.retention = true, retention })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 5)
	task, err := b.svc.Start(context.Background(), replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	final := b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.NotNil(t, final.FinishedAt)

	dlqtest.Eventually(t, 10*time.Second, func() bool {
		g := taskGauges(t, b.reg, task.ID)
		return g["published"] == 5 && g["remaining"] == 0 && g["requested"] == 5
	}, "the final progress never showed: %v", taskGauges(t, b.reg, task.ID))
	var gone time.Time
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		if taskGauges(t, b.reg, task.ID) != nil {
			return false
		}
		gone = time.Now()
		return true
	}, "the gauges of task %d were never removed", task.ID)
	// PostgreSQL's clock stamped finished_at; the same machine's.
	require.GreaterOrEqual(t, gone.Sub(*final.FinishedAt), retention-200*time.Millisecond,
		"removed before the retention ran out")
}
