//go:build faults

package replay_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// kill -9 the replaying process ten times during a 10,000-message task:
// no row stays replaying after the lease, replayed + pending = 10,000, every
// row marked replayed did arrive, and duplicates at the target stay within
// the in-flight window per kill (dlq itself republishes nothing whose
// outcome it does not know, so there should be none).
func TestFaultKillReplayingProcess(t *testing.T) {
	b := setup(t, func(o *setupOpts) { o.noService, o.noConsumer = true, true })
	q := b.targetQueue(t)
	const n, kills, window = 10_000, 10, 200
	b.seed(t, q, n)
	control := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, b.app, control)
	env := []string{"DLQ_REPLAY_LEASE=1s", fmt.Sprintf("DLQ_REPLAY_WINDOW=%d", window), "DLQ_REPLAY_BATCH_SIZE=200"}
	p := b.serve(t, control, env...)
	c := b.waitAnswering(t, control)
	task := taskOf(t, call(t, c, fmt.Sprintf(`{"command":"replay","command_id":"kill","filter":{"source_queue":%q},"rate_per_second":1500,"confirm":true}`, q)))

	progress := func() int64 {
		got, err := b.svc.Get(context.Background(), task.ID)
		require.NoError(t, err)
		return got.Published + got.Unknown + got.Failed
	}
	for i := 0; i < kills; i++ {
		before := progress()
		dlqtest.Eventually(t, 60*time.Second, func() bool { return progress() >= before+250 }, "kill %d: no progress", i)
		p.kill()
		t.Logf("kill %d at %d settled", i+1, progress())
		p = b.serve(t, control, env...)
	}
	final := b.waitTask(t, task.ID, 120*time.Second, replay.StatusCompleted)
	t.Logf("final: published %d, unknown %d, failed %d, skipped %d", final.Published, final.Unknown, final.Failed, final.Skipped)
	require.Equal(t, int64(n), final.Published+final.Unknown+final.Failed+final.Skipped)
	require.Zero(t, final.Failed)

	dlqtest.Eventually(t, 30*time.Second, func() bool { return b.count(t, "status = 'replaying'") == 0 },
		"rows still replaying after the lease")
	replayed := b.count(t, "status = 'replayed'")
	pending := b.count(t, "status = 'pending'")
	require.Equal(t, n, replayed+pending)
	require.Equal(t, int(final.Unknown), b.count(t, "status = 'pending' AND last_replay_error LIKE 'outcome unknown%'"))

	per := b.countAtTarget(t, q)
	dups := 0
	for _, k := range per {
		dups += k - 1
	}
	t.Logf("%d distinct messages at the target, %d duplicates", len(per), dups)
	require.LessOrEqual(t, dups, kills*window)
	for _, id := range b.ids(t, "status = 'replayed'") {
		require.GreaterOrEqual(t, per[id], 1, "message %d is marked replayed but never arrived", id)
	}
	b.requireSummaryExact(t)
}

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
