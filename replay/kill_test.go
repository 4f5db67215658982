//go:build !faults

// This file runs in the normal suite: it kills only its own dlq processes.
// It is left out of the fault pass (-tags faults -run Fault) so that its
// TestFault name does not make it run twice.

package replay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
)

// kill -9 the replaying process ten times during a 10,000-message task,
// with on_unknown retry (the default): every message ends replayed and
// arrived, none unknown; no row stays replaying after the lease; whichever
// process resumes the task sends again what the killed one may have
// published (at or below its write-ahead mark). Only those arrive twice:
// a message arrives at most once plus once per unknown outcome its item
// counts, and the duplicates stay within what one kill can leave in doubt
// (the window and the outcomes not yet recorded), per kill.
func TestFaultKillReplayingProcess(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noService, o.noConsumer = true, true })
	q := b.targetQueue(t)
	const n, kills, window, batch = 10_000, 10, 200, 200
	b.seed(t, q, n)
	control := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, b.app, control)
	// Ten kills a few hundred messages apart: a message in doubt at one
	// kill could be in doubt at the next ones too, so the bound is raised
	// past what ten kills can spend.
	env := []string{"DLQ_REPLAY_LEASE=1s", fmt.Sprintf("DLQ_REPLAY_WINDOW=%d", window), fmt.Sprintf("DLQ_REPLAY_BATCH_SIZE=%d", batch),
		"DLQ_REPLAY_UNKNOWN_RETRIES=10"}
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
	t.Logf("final: published %d, unknown %d, failed %d, skipped %d, republished %d",
		final.Published, final.Unknown, final.Failed, final.Skipped, final.Republished)
	require.Equal(t, int64(n), final.Published, "every message replayed: what was in doubt was sent again")
	require.Zero(t, final.Unknown+final.Failed+final.Skipped)

	dlqtest.Eventually(t, 30*time.Second, func() bool { return b.count(t, "status = 'replaying'") == 0 },
		"rows still replaying after the lease")
	require.Equal(t, n, b.count(t, "status = 'replayed' AND replay_count = 1 AND last_replay_error IS NULL"))

	unknowns := map[int64]int{}
	rows, err := b.db.Query(context.Background(), `SELECT message_id, unknown_count FROM replay_task_items WHERE task_id = $1 AND unknown_count > 0`, task.ID)
	require.NoError(t, err)
	var sent int64
	for rows.Next() {
		var id int64
		var k int
		require.NoError(t, rows.Scan(&id, &k))
		unknowns[id] = k
		sent += int64(k)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, final.Republished, sent, "one publish sent again per unknown outcome")

	per := b.countAtTarget(t, q)
	require.Len(t, per, n, "every message arrived")
	dups := 0
	for id, k := range per {
		dups += k - 1
		require.LessOrEqual(t, k, 1+unknowns[id], "message %d arrived %d times with %d unknown outcomes", id, k, unknowns[id])
	}
	// docs/REPLAY.md: per kill, the window and the confirmed outcomes not
	// yet recorded (queued, and in three settlements).
	perKill := window + 4*(max(window, batch)+window)
	t.Logf("%d distinct messages at the target, %d duplicates; %d messages in doubt after a kill, sent again", len(per), dups, len(unknowns))
	require.LessOrEqual(t, dups, kills*perKill)
	b.requireSummaryExact(t)
}
