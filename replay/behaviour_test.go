package replay_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// An unroutable target and a missing exchange mark nothing replayed and
// record why; a replay running beside them is not affected.
func TestReplayUnroutableAndMissingExchange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.targetQueue(t)
	ids := b.seed(t, good, 30)
	ctx := context.Background()

	unroutable, err := b.svc.Start(ctx, replay.Request{IDs: ids[:10], Target: &replay.Target{Exchange: "", RoutingKey: dlqtest.Name(t, "nowhere")}}, operator)
	require.NoError(t, err)
	missing, err := b.svc.Start(ctx, replay.Request{IDs: ids[10:20], Target: &replay.Target{Exchange: dlqtest.Name(t, "noexchange"), RoutingKey: "k"}}, operator)
	require.NoError(t, err)
	fine, err := b.svc.Start(ctx, replay.Request{IDs: ids[20:]}, operator)
	require.NoError(t, err)

	for _, id := range []int64{unroutable.ID, missing.ID} {
		task := b.waitTask(t, id, 20*time.Second, replay.StatusCompleted)
		require.Equal(t, int64(10), task.Failed, "task %d", id)
		require.Zero(t, task.Published)
		require.Equal(t, replay.OutcomeNonePublished, task.Outcome, "completed, but nothing delivered")
	}
	task := b.waitTask(t, fine.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(10), task.Published)
	require.Equal(t, replay.OutcomeAllPublished, task.Outcome)
	b.consume(t, good, 10, 10*time.Second)

	require.Equal(t, 10, b.count(t, "status = 'replayed'"))
	require.Equal(t, 10, b.count(t, "id = ANY($1) AND status = 'pending' AND last_replay_error LIKE 'unroutable%NO_ROUTE%'", ids[:10]))
	require.Equal(t, 10, b.count(t, "id = ANY($1) AND status = 'pending' AND last_replay_error LIKE '%does not exist%'", ids[10:20]))
	require.Zero(t, b.count(t, "replay_count > 0 AND status <> 'replayed'"))
	b.requireSummaryExact(t)

	replays := func(result string) float64 {
		return testutil.ToFloat64(mustCollector(t, b.reg, "dlq_replays_total", "result", result))
	}
	require.Equal(t, 10.0, replays("published"))
	require.Equal(t, 10.0, replays("unroutable"))
	require.Equal(t, 10.0, replays("failed"))
	require.Zero(t, replays("unknown"))
}

// mustCollector finds the series of a metric with one label value.
func mustCollector(t *testing.T, reg *prometheus.Registry, name, label, value string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
					g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "copy"})
					g.Set(v)
					return g
				}
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return nil
}

// 500 messages at 100 per second take 5 s (±10%), timed at the target
// from the first arrival to the last.
func TestReplayRate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	b.seed(t, q, 500)
	ch := dlqtest.Channel(t, b.app)
	require.NoError(t, ch.Qos(1000, 0, false))
	ds, err := ch.Consume(q, "", true, false, false, false, nil)
	require.NoError(t, err)
	task, err := b.svc.Start(context.Background(), replay.Request{Filter: &store.Filter{SourceQueue: q}, RatePerSecond: 100}, operator)
	require.NoError(t, err)
	var first, last time.Time
	for i := 0; i < 500; i++ {
		select {
		case <-ds:
			last = time.Now()
			if i == 0 {
				first = last
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("received %d of 500", i)
		}
	}
	took := last.Sub(first)
	t.Logf("500 messages at 100/s took %s at the target", took)
	require.InDelta(t, 5*time.Second, took, float64(500*time.Millisecond))
	b.waitTask(t, task.ID, 10*time.Second, replay.StatusCompleted)
}

// Cancel stops a task within one publish; the unpublished messages stay
// pending, none stays replaying.
func TestReplayCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	b.seed(t, q, 200)
	ctx := context.Background()
	task, err := b.svc.Start(ctx, replay.Request{Filter: &store.Filter{SourceQueue: q}, RatePerSecond: 50}, operator)
	require.NoError(t, err)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, b.app, q) >= 10 }, "replay did not start")
	cancelled, err := b.svc.Cancel(ctx, task.ID, operator, nil)
	require.NoError(t, err)
	require.Equal(t, replay.StatusCancelled, cancelled.Status)
	// What was sent by now: in the queue, or sent and not yet confirmed
	// (on a loaded machine the queue's depth lags its publishes by more
	// than one; read in flight first, so that none falls between the two).
	sending := int(inFlight(t, b.reg))
	atCancel := sending + dlqtest.QueueDepth(t, b.app, q)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return b.count(t, "status = 'replaying'") == 0 }, "claims not handed back")
	// Give a runner that ignored the cancel time to show it.
	time.Sleep(300 * time.Millisecond) //nolint:forbidigo // proving an absence: nothing more arrives
	after := dlqtest.QueueDepth(t, b.app, q)
	// The runner publishes nothing after it hears of the cancel but the
	// publish under way; the depth read at the cancel may also miss one
	// message sent but not yet enqueued.
	require.LessOrEqual(t, after, atCancel+2, "at most the publish under way when the cancel arrived")
	require.Less(t, after, 100)
	final, err := b.svc.Get(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, replay.StatusCancelled, final.Status)
	require.Equal(t, int64(after), final.Published)
	require.Equal(t, after, b.count(t, "status = 'replayed'"))
	require.Equal(t, 200-after, b.count(t, "status = 'pending'"))
	_, err = b.svc.Cancel(ctx, task.ID, operator, nil)
	require.NoError(t, err, "cancelling twice is harmless")
	b.requireSummaryExact(t)
}

// A dry run returns the count and a sample and changes nothing: no task,
// no audit row, no status change.
func TestReplayDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	ids := b.seed(t, q, 20)
	_, err := b.db.Exec(context.Background(), `UPDATE dead_messages SET replay_count = 5 WHERE id = ANY($1)`, ids[:3])
	require.NoError(t, err)
	task, err := b.svc.Start(context.Background(), replay.Request{Filter: &store.Filter{SourceQueue: q}, DryRun: true}, operator)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDryRun, task.Status)
	require.True(t, task.DryRun)
	require.Zero(t, task.ID)
	require.Equal(t, int64(20), task.Requested)
	require.Equal(t, int64(3), task.Skipped, "the loop guard would skip three")
	require.Equal(t, ids[:10], task.Sample)
	require.Zero(t, b.tableCount(t, "replay_tasks"))
	require.Zero(t, b.tableCount(t, "audit_log"))
	require.Equal(t, 20, b.count(t, "status = 'pending'"))
	require.Zero(t, dlqtest.QueueDepth(t, b.app, q))
}

// The set is fixed when the task starts: messages arriving later, even
// matching the filter, are not swept in.
func TestReplaySnapshotExcludesLaterArrivals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	b.seed(t, q, 5)
	task, err := b.svc.Start(context.Background(), replay.Request{Filter: &store.Filter{SourceQueue: q}, DelaySeconds: 1}, operator)
	require.NoError(t, err)
	require.Equal(t, replay.StatusScheduled, task.Status)
	b.seed(t, q, 3) // arrives before the task starts
	task = b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(5), task.Requested)
	require.Equal(t, int64(5), task.Published)
	require.Equal(t, 5, b.count(t, "status = 'replayed'"))
	require.Equal(t, 3, b.count(t, "status = 'pending'"))
}

// Canary: the first messages are published, and when one of them dies
// again the task stops with canary_failed, leaving the rest untouched.
func TestReplayCanaryStopsOnReDeath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src, _ := b.deadLetter(t, 10)
	// The application still fails: everything replayed dies again.
	stop := b.rejectForever(t, src)
	defer stop()
	task, err := b.svc.Start(context.Background(), replay.Request{
		Filter: &store.Filter{SourceQueue: src}, Canary: &replay.Canary{Count: 2, WaitSeconds: 2},
	}, operator)
	require.NoError(t, err)
	task = b.waitTask(t, task.ID, 30*time.Second, replay.StatusCanaryFailed, replay.StatusCompleted)
	require.Equal(t, replay.StatusCanaryFailed, task.Status)
	require.Contains(t, task.Error, "2 of 2 canary messages died again")
	require.Equal(t, int64(2), task.Published)
	require.Len(t, task.CanaryIDs, 2)
	require.Equal(t, 8, b.count(t, "source_queue = $1 AND replay_count = 0 AND status = 'pending'", src), "the rest untouched")
	require.Equal(t, 2, b.count(t, "source_queue = $1 AND replay_count = 1 AND status = 'pending'", src))
}

// Canary: when no canary message dies again, the task does the rest.
func TestReplayCanaryPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	b.seed(t, q, 10)
	task, err := b.svc.Start(context.Background(), replay.Request{
		Filter: &store.Filter{SourceQueue: q}, Canary: &replay.Canary{Count: 3, WaitSeconds: 1},
	}, operator)
	require.NoError(t, err)
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		got, err := b.svc.Get(context.Background(), task.ID)
		require.NoError(t, err)
		return got.Status == replay.StatusCanaryWait
	}, "task never waited for its canary")
	require.Equal(t, 3, dlqtest.QueueDepth(t, b.app, q), "only the canary is out during the wait")
	task = b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(10), task.Published)
}

// rejectForever rejects (dead-letters) every message arriving in queue
// until stopped.
func (b *bundle) rejectForever(t *testing.T, queue string) func() {
	t.Helper()
	ch := dlqtest.Channel(t, b.app)
	tag := dlqtest.Name(t, "rejector")
	ds, err := ch.Consume(queue, tag, false, false, false, false, nil)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range ds {
			_ = d.Reject(false)
		}
	}()
	return func() {
		_ = ch.Cancel(tag, false)
		<-done
	}
}

// The loop guard skips messages replayed max_replays times, with the
// reason, unless force.
func TestReplayLoopGuard(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.maxReplays = 3 })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 4)
	_, err := b.db.Exec(context.Background(), `UPDATE dead_messages SET replay_count = 3 WHERE id = ANY($1)`, ids[:2])
	require.NoError(t, err)
	task, err := b.svc.Start(context.Background(), replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	task = b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(2), task.Skipped)
	require.Equal(t, int64(2), task.Published)
	var detail string
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT detail FROM replay_task_items WHERE task_id = $1 AND message_id = $2`, task.ID, ids[0]).Scan(&detail))
	require.Contains(t, detail, "loop guard")

	forced, err := b.svc.Start(context.Background(), replay.Request{IDs: ids[:2], Force: true}, operator)
	require.NoError(t, err)
	forced = b.waitTask(t, forced.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(2), forced.Published)
	require.Equal(t, 2, b.count(t, "id = ANY($1) AND replay_count = 4", ids[:2]))
	got := b.consume(t, q, 4, 10*time.Second)
	counts := map[int64]int{}
	for _, d := range got {
		counts[d.Headers[broker.HeaderReplayCount].(int64)]++
	}
	require.Equal(t, map[int64]int{1: 2, 4: 2}, counts)
}

// A task interrupted by a shutdown resumes in another instance (here: a new
// service on the same database) and every message is published exactly
// once.
func TestReplayResumesAfterRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	const n = 1000
	b.seed(t, q, n)
	task, err := b.svc.Start(context.Background(), replay.Request{Filter: &store.Filter{SourceQueue: q}, RatePerSecond: 1000}, operator)
	require.NoError(t, err)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, b.app, q) >= 200 }, "replay did not start")
	b.stopSvc()
	mid, err := b.svc.Get(context.Background(), task.ID)
	require.NoError(t, err)
	require.Equal(t, replay.StatusRunning, mid.Status)
	require.Less(t, mid.Published, int64(n))
	require.Zero(t, b.count(t, "status = 'replaying'"), "a clean shutdown hands every claim back")

	second := b.newService(t, setupOpts{lease: 3 * time.Second, batchSize: 100}, nil)
	b.run(t, second)
	b.svc = second
	final := b.waitTask(t, task.ID, 30*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(n), final.Published)
	require.Zero(t, final.Unknown)
	got := b.consume(t, q, n, 20*time.Second)
	seen := map[int64]bool{}
	for _, d := range got {
		id := d.Headers[broker.HeaderID].(int64)
		require.False(t, seen[id], "message %d published twice", id)
		seen[id] = true
	}
	require.Zero(t, dlqtest.QueueDepth(t, b.app, q))
	b.requireSummaryExact(t)
	require.Zero(t, b.tableCount(t, "replay_claims"), "every claim's mark is gone once it ended")
}

// Two tasks over the same messages, run at once: each message is
// published once; the second task skips what the first replayed.
func TestReplayOverlappingTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	const n = 600
	b.seed(t, q, n)
	other := b.newService(t, setupOpts{lease: 3 * time.Second, batchSize: 50}, nil)
	b.run(t, other)
	var wg sync.WaitGroup
	var tasks [2]replay.Task
	for i := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			tasks[i], err = b.svc.Start(context.Background(), replay.Request{Filter: &store.Filter{SourceQueue: q, Status: "all"}}, operator)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	var published int64
	for _, task := range tasks {
		final := b.waitTask(t, task.ID, 30*time.Second, replay.StatusCompleted)
		require.Equal(t, int64(n), final.Requested)
		require.Equal(t, int64(n), final.Published+final.Skipped, "every item settled: published here or skipped as replayed by the other")
		published += final.Published
	}
	require.Equal(t, int64(n), published)
	require.Zero(t, b.tableCount(t, "replay_claims"), "every claim's mark is gone once it ended")
	got := b.consume(t, q, n, 20*time.Second)
	seen := map[int64]bool{}
	for _, d := range got {
		id := d.Headers[broker.HeaderID].(int64)
		require.False(t, seen[id], "message %d published twice", id)
		seen[id] = true
	}
	require.Zero(t, dlqtest.QueueDepth(t, b.app, q))
}

// The message's target can be overridden: another exchange and routing key.
func TestReplayTargetOverride(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src, ids := b.deadLetter(t, 2)
	ex := dlqtest.Name(t, "other")
	require.NoError(t, b.ch.ExchangeDeclare(ex, "direct", false, true, false, false, nil))
	dlqtest.DeleteExchanges(t, b.app, ex)
	tgt := b.targetQueue(t)
	require.NoError(t, b.ch.QueueBind(tgt, "rk", ex, false, nil))
	task, err := b.svc.Start(context.Background(), replay.Request{IDs: ids, Target: &replay.Target{Exchange: ex, RoutingKey: "rk"}}, operator)
	require.NoError(t, err)
	b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	got := b.consume(t, tgt, 2, 10*time.Second)
	require.True(t, strings.HasPrefix(string(got[0].Body), "message "))
	require.Zero(t, dlqtest.QueueDepth(t, b.app, src))
}
