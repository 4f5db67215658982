package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// waitingItems counts a task's items that wait to be sent again.
func (b *bundle) waitingItems(t *testing.T, taskID int64) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT count(*) FROM replay_task_items WHERE task_id = $1 AND outcome IS NULL AND unknown_count > 0`, taskID).Scan(&n))
	return n
}

// The outcomes of published messages cannot be recorded (a trigger in
// the test's schema refuses every update of the task's items) until the
// shutdown timeout, and the runner gives up on them. Their claim keeps its
// write-ahead mark, so that recovery takes the rows as maybe published:
// with on_unknown hold, unknown, and never sent again. Had the mark gone,
// recovery would have handed them back as never published, and the task
// would have sent every one of them a second time, counted nowhere.
func TestReplaySettlementGivenUpKeepsMarks(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.noConsumer, o.noService, o.onUnknown = true, true, replay.OnUnknownHold
		o.lease, o.shutdownTimeout = 2*time.Second, time.Second
	})
	ctx := context.Background()
	q := b.targetQueue(t)
	const n = 5
	ids := b.seed(t, q, n)
	task, err := b.svc.Start(ctx, replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `
CREATE FUNCTION refuse_settlement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'test: settlement refused'; END $$;
CREATE TRIGGER refuse_settlement BEFORE UPDATE ON replay_task_items FOR EACH ROW EXECUTE FUNCTION refuse_settlement()`)
	require.NoError(t, err)

	stop := b.run(t, b.svc)
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		return dlqtest.QueueDepth(t, b.app, q) == n && inFlight(t, b.reg) == 0
	}, "the messages were not published and confirmed")
	stop() // the outcomes still cannot be recorded: the drain gives up after its timeout
	require.Equal(t, n, b.count(t, "status = 'replaying'"), "the rows stay claimed")
	require.Equal(t, 1, b.tableCount(t, "replay_claims"), "the claim keeps its write-ahead mark")

	_, err = b.db.Exec(ctx, `DROP TRIGGER refuse_settlement ON replay_task_items`)
	require.NoError(t, err)
	b.svc = b.newService(t, setupOpts{lease: 2 * time.Second, batchSize: 100, onUnknown: replay.OnUnknownHold}, prometheus.NewRegistry())
	b.run(t, b.svc)
	final := b.waitTask(t, task.ID, 30*time.Second, replay.StatusCompleted)
	t.Logf("%+v", final)
	require.Equal(t, int64(n), final.Unknown, "taken back after the lease as maybe published")
	require.Zero(t, final.Published+final.Failed+final.Republished+final.Remaining)
	require.Equal(t, n, b.count(t, "status = 'pending' AND last_replay_error = $1", store.UnknownOutcomeLeaseExpired))

	copies := byID(t, b.consume(t, q, dlqtest.QueueDepth(t, b.app, q), 20*time.Second))
	require.Len(t, copies, n)
	for id, cs := range copies {
		require.Len(t, cs, 1, "message %d: with on_unknown hold at most one copy arrives", id)
	}
	require.Zero(t, b.tableCount(t, "replay_claims"), "recovery drops the spent mark")
	b.requireSummaryExact(t)
}

// A cancel that arrives while the task's runner is already stopping (dlq
// shuts down): the publishes in flight end unknown after the cancel (at
// the drain's timeout), as to be sent again, since the run stopped for the
// shutdown first; and no runner takes a cancelled task again. The runner
// settles them as unknown itself once their outcomes are in, as it does
// when the cancel reaches it first.
func TestReplayCancelWhileStoppingSettlesRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService, o.shutdownTimeout = true, true, 2*time.Second })
	q, _ := b.suspendedQueue(t)
	const n = 5
	ids := b.seed(t, q, n)
	ctx := context.Background()

	runCtx, shutdown := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, b.svc.Run(runCtx))
	}()
	t.Cleanup(func() { shutdown(); <-done })
	task, err := b.svc.Start(ctx, replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	dlqtest.Eventually(t, 20*time.Second, func() bool { return inFlight(t, b.reg) == n }, "the publishes are not awaiting their confirms")

	shutdown() // the run's context ends here; its drain waits for the confirms
	cancelled, err := b.svc.Cancel(ctx, task.ID, operator, nil)
	require.NoError(t, err)
	require.Equal(t, replay.StatusCancelled, cancelled.Status)
	require.Equal(t, int64(n), cancelled.Remaining, "still in flight when the cancel came")
	<-done // the drain's timeout ends the publishes, without their confirms

	final, err := b.svc.Get(ctx, task.ID)
	require.NoError(t, err)
	t.Logf("%+v", final)
	require.Equal(t, replay.StatusCancelled, final.Status)
	require.Equal(t, int64(n), final.Unknown, "what waited to be sent again is unknown")
	require.Zero(t, final.Remaining)
	require.Zero(t, final.Published+final.Failed)
	require.Zero(t, b.waitingItems(t, task.ID))
	require.Equal(t, n, b.count(t, "status = 'pending' AND last_replay_error LIKE 'outcome unknown:%'"))
	b.requireSummaryExact(t)
}

// With on_unknown retry, a canary message whose confirm times out is sent
// again like any other message of the task, before the canary is judged:
// the queue runs again, a copy is confirmed, and the canary passes. It
// used to fail at once, the message settled unknown with none of its
// retries spent. The task may send it again often: resuming the queue
// (rabbitmqctl) can take longer than the first few copies' timeouts.
func TestReplayCanarySendsUnknownAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.noConsumer, o.confirmTimeout, o.unknownRetries = true, time.Second, replay.MaxUnknownRetries
	})
	q, resume := b.suspendedQueue(t)
	const n = 3
	ids := b.seed(t, q, n)
	ctx := context.Background()
	task, err := b.svc.Start(ctx, replay.Request{IDs: ids, Canary: &replay.Canary{Count: 1, WaitSeconds: 1}}, operator)
	require.NoError(t, err)
	dlqtest.Eventually(t, 20*time.Second, func() bool { return b.waitingItems(t, task.ID) > 0 },
		"the canary's publish did not end unknown")
	resume()
	final := b.waitTask(t, task.ID, 60*time.Second, replay.StatusCompleted, replay.StatusCanaryFailed)
	t.Logf("%+v", final)
	require.Equal(t, replay.StatusCompleted, final.Status, final.Error)
	require.Equal(t, int64(n), final.Published)
	require.Zero(t, final.Unknown+final.Failed+final.Remaining)
	require.GreaterOrEqual(t, final.Republished, int64(1))
	require.Len(t, final.CanaryIDs, 1)
	b.requireSummaryExact(t)
}

// A message to be sent again after an unknown outcome whose copy is
// refused before it is published (here its exchange is missing) fails,
// and is not counted in republished: that copy was never sent. The task
// and the metric agree.
func TestReplayRepublishedCountsOnlyCopiesSent(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer, o.noService = true, true })
	ctx := context.Background()
	ids := b.seed(t, dlqtest.Name(t, "src"), 1)
	task, err := b.svc.Start(ctx, replay.Request{IDs: ids, Target: &replay.Target{Exchange: dlqtest.Name(t, "gone"), RoutingKey: "k"}}, operator)
	require.NoError(t, err)

	// A runner that claimed and marked the message, and died: recovery
	// takes it back as maybe published, to be sent again.
	const holder = "a runner that died"
	_, ok, err := b.st.AcquireReplayTask(ctx, holder, time.Minute, nil)
	require.NoError(t, err)
	require.True(t, ok)
	claim, err := b.st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: holder, Lease: 100 * time.Millisecond,
		IDs: ids, MaxReplays: 5, MarkFirst: 1})
	require.NoError(t, err)
	require.Len(t, claim.Messages, 1)
	var retried int64
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		got, err := b.st.RecoverExpiredReplayClaims(ctx, 100)
		require.NoError(t, err)
		retried += got.Retried
		return retried == 1
	}, "the claim was not taken back")
	require.NoError(t, b.st.ReleaseReplayTask(ctx, task.ID, holder))
	require.Equal(t, 1, b.waitingItems(t, task.ID))

	b.run(t, b.svc)
	final := b.waitTask(t, task.ID, 30*time.Second, replay.StatusCompleted)
	t.Logf("%+v", final)
	require.Equal(t, int64(1), final.Failed, "its exchange is missing")
	require.Zero(t, final.Republished, "the copy was never sent")
	require.Zero(t, replaysTotal(t, b.reg, "republished"))
	require.Equal(t, 1, b.count(t, "status = 'pending' AND last_replay_error LIKE 'exchange % does not exist'"))
	b.requireSummaryExact(t)
}
