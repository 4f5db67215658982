//go:build faults

package replay_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %v: %s", args, out)
}

// A memory alarm during a replay: publishing waits, nothing is marked
// replayed, and the replay completes once the alarm clears. The alarm
// outlasts replay.confirm_timeout three times over, and nothing ends as
// unknown: time blocked by an alarm is not counted (docs/REPLAY.md,
// replay.confirm_timeout); the publish sent as the alarm struck waits for
// its confirm with the rest.
func TestFaultMemoryAlarm(t *testing.T) {
	const timeout = time.Second
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.confirmTimeout = true, timeout })
	q := b.targetQueue(t)
	const n = 300
	b.seed(t, q, n)
	t.Cleanup(func() {
		_ = exec.Command("rabbitmqctl", "set_vm_memory_high_watermark", "0.4").Run()
	})
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.0001")
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		out, _ := exec.Command("rabbitmq-diagnostics", "-q", "alarms").CombinedOutput()
		return strings.Contains(strings.ToLower(string(out)), "memory alarm")
	}, "memory alarm not raised")

	task, err := b.svc.Start(context.Background(), replay.Request{Filter: &store.Filter{SourceQueue: q}}, operator)
	require.NoError(t, err)
	// RabbitMQ blocks a connection when it publishes during an alarm.
	dlqtest.Eventually(t, 30*time.Second, b.conn.Blocked, "connection not blocked by the alarm")
	// Proving an absence: for three confirm timeouts, nothing gets
	// replayed and nothing ends.
	time.Sleep(3 * timeout) //nolint:forbidigo // nothing to poll for
	got, err := b.svc.Get(context.Background(), task.ID)
	require.NoError(t, err)
	require.True(t, b.conn.Blocked())
	require.Zero(t, got.Published)
	require.Zero(t, got.Failed+got.Unknown, "waiting is not failing: time blocked by an alarm is not held against the confirm timeout")
	require.Zero(t, b.count(t, "status = 'replayed'"))
	require.Zero(t, b.count(t, "last_replay_error IS NOT NULL"))

	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4")
	final := b.waitTask(t, task.ID, 60*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(n), final.Published)
	require.Zero(t, final.Unknown+final.Failed)
	per := b.countAtTarget(t, q)
	require.Len(t, per, n)
	for id, k := range per {
		require.Equal(t, 1, k, "message %d arrived %d times", id, k)
	}
	b.requireSummaryExact(t)
}
