package replay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
)

// replaysTotal reads dlq_replays_total{result}.
func replaysTotal(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "dlq_replays_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "result" && lp.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no dlq_replays_total{result=%q}", result)
	return 0
}

// queueProcess suspends ("suspend") or resumes ("resume") the Erlang
// process of a classic queue. A suspended queue takes deliveries into its
// mailbox but handles none, so the broker withholds the confirms of
// messages routed to it, without blocking the publishing connection (as an
// alarm would) or closing anything; resumed, it takes in what it was sent.
// Only that queue is touched.
func queueProcess(t *testing.T, action, queue string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	expr := fmt.Sprintf(`{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"%s">>)), sys:%s(amqqueue:get_pid(Q)).`, queue, action)
	out, err := dlqtest.Rabbitmqctl(ctx, "eval", expr).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		return fmt.Errorf("rabbitmqctl eval %s: %v: %s", expr, err, out)
	}
	return nil
}

// suspendedQueue declares a classic queue, suspends it (queueProcess), and
// returns it with the function that resumes it; the test's end resumes it
// if need be, before deleting it.
func (b *bundle) suspendedQueue(t *testing.T) (string, func()) {
	t.Helper()
	q := dlqtest.Name(t, "tgt")
	_, err := b.ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, b.app, q)
	require.NoError(t, queueProcess(t, "suspend", q))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, queueProcess(t, "resume", q))
		}
	}
	// Registered after the queue's deletion, so it runs first: a
	// suspended queue would never answer the delete.
	t.Cleanup(func() {
		if !resumed {
			if err := queueProcess(t, "resume", q); err != nil {
				t.Errorf("queue %s left suspended: %v", q, err)
			}
		}
	})
	return q, resume
}

// inFlight reads dlq_replay_publishes_in_flight.
func inFlight(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "dlq_replay_publishes_in_flight" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// closeMidReplay replays n messages into a queue that withholds its
// confirms, and, once the replay's whole window awaits them, closes dlq's
// AMQP connection from the broker's side: every publish in flight ends
// without its confirm, although the broker took each one. Then the queue
// goes on. It returns the finished task and every copy that arrived.
func closeMidReplay(t *testing.T, onUnknown string, n, window int) (*bundle, replay.Task, []amqp.Delivery) {
	t.Helper()
	conn := dlqtest.Name(t, "conn")
	b := setup(t, func(o *setupOpts) {
		o.noConsumer, o.connName, o.onUnknown, o.window, o.batchSize = true, conn, onUnknown, window, 200
	})
	q, resume := b.suspendedQueue(t)
	ids := b.seed(t, q, n)
	ctx := context.Background()
	task, err := b.svc.Start(ctx, replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return inFlight(t, b.reg) == float64(window) },
		"the window never filled: %v in flight", inFlight(t, b.reg))
	require.NoError(t, dlqtest.CloseConnection(conn))
	// The broker took them all: a confirm is all they lacked.
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		cur, err := b.svc.Get(ctx, task.ID)
		require.NoError(t, err)
		return cur.Unknown+cur.Republished > 0 || b.count(t, "last_replay_error LIKE 'outcome unknown:%'") > 0
	}, "the close ended no publish as unknown")
	resume()
	final := b.waitTask(t, task.ID, 60*time.Second, replay.StatusCompleted)
	t.Logf("published %d, unknown %d, failed %d, republished %d", final.Published, final.Unknown, final.Failed, final.Republished)
	got := b.consume(t, q, dlqtest.QueueDepth(t, b.app, q), 60*time.Second)
	return b, final, got
}

// byID groups the copies that arrived by x-dlq-id.
func byID(t *testing.T, got []amqp.Delivery) map[int64][]amqp.Delivery {
	t.Helper()
	per := map[int64][]amqp.Delivery{}
	for _, d := range got {
		id, ok := d.Headers[broker.HeaderID].(int64)
		require.True(t, ok, "a replayed message carries x-dlq-id: %v", d.Headers)
		per[id] = append(per[id], d)
	}
	return per
}

// The broker closes dlq's connection while a replay's whole window awaits
// its confirms. With on_unknown retry (the default) the task sends each of
// those publishes again once the connection is back, and completes with
// every message delivered and marked replayed: unknown 0, failed 0. What
// arrived twice is exactly what the task sent again, at most the in-flight
// window, and every copy of a message carries the same (x-dlq-id,
// x-dlq-replay-count), with a replay id of its own. The items' unknown
// counts add up to republished, and so does the metric.
func TestReplayConnectionLossSendsUnknownsAgain(t *testing.T) {
	t.Parallel()
	const n, window = 1000, 300
	b, final, got := closeMidReplay(t, "", n, window)
	require.Equal(t, int64(n), final.Published)
	require.Zero(t, final.Unknown, "every unknown outcome was sent again")
	require.Zero(t, final.Failed)
	require.Zero(t, final.Remaining)
	require.Positive(t, final.Republished)
	require.LessOrEqual(t, final.Republished, int64(window), "at most the window is in doubt")
	require.Equal(t, replay.OnUnknownRetry, final.Request.OnUnknown, "the task records what it does")

	require.Equal(t, n, b.count(t, "status = 'replayed' AND replay_count = 1 AND last_replay_error IS NULL"),
		"sent again, a message is the same replay: replay_count 1")
	var sum int64
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT coalesce(sum(unknown_count), 0) FROM replay_task_items WHERE task_id = $1`, final.ID).Scan(&sum))
	require.Equal(t, final.Republished, sum, "one republish per unknown outcome")
	require.Equal(t, float64(final.Republished), replaysTotal(t, b.reg, "republished"))
	require.Zero(t, replaysTotal(t, b.reg, "unknown"))

	per := byID(t, got)
	require.Len(t, per, n, "every message arrived")
	twice := 0
	for id, copies := range per {
		require.LessOrEqual(t, len(copies), 2, "message %d arrived %d times", id, len(copies))
		if len(copies) == 2 {
			twice++
		}
		seen := map[string]bool{}
		for _, d := range copies {
			require.Equal(t, int64(1), d.Headers[broker.HeaderReplayCount], "message %d: the pair a consumer dedupes on", id)
			rid, _ := d.Headers[broker.HeaderReplayID].(string)
			require.False(t, seen[rid], "message %d: every copy has its own x-dlq-replay-id", id)
			seen[rid] = true
		}
	}
	t.Logf("%d messages arrived twice, %d sent again", twice, final.Republished)
	// The broker had taken every publish the close caught.
	require.Equal(t, int(final.Republished), twice, "what was sent again arrived twice")
	b.requireSummaryExact(t)
}

// With on_unknown hold, the same fault leaves the publishes it caught
// pending as unknown, as before: nothing is sent twice, each arrives once
// (the broker had taken them), and the task counts them.
func TestReplayConnectionLossHoldsUnknowns(t *testing.T) {
	t.Parallel()
	const n, window = 1000, 300
	b, final, got := closeMidReplay(t, replay.OnUnknownHold, n, window)
	require.Positive(t, final.Unknown)
	require.LessOrEqual(t, final.Unknown, int64(window))
	require.Zero(t, final.Republished)
	require.Zero(t, final.Failed)
	require.Equal(t, int64(n), final.Published+final.Unknown)
	require.Equal(t, replay.OnUnknownHold, final.Request.OnUnknown)
	require.Equal(t, int(final.Unknown), b.count(t, "status = 'pending' AND replay_count = 0 AND last_replay_error LIKE 'outcome unknown:%'"))
	require.Equal(t, int(final.Published), b.count(t, "status = 'replayed'"))
	per := byID(t, got)
	require.Len(t, per, n, "the broker had taken the unknown ones")
	for id, copies := range per {
		require.Len(t, copies, 1, "message %d arrived %d times", id, len(copies))
	}
	require.Zero(t, replaysTotal(t, b.reg, "republished"))
	require.Equal(t, float64(final.Unknown), replaysTotal(t, b.reg, "unknown"))
	b.requireSummaryExact(t)
}
