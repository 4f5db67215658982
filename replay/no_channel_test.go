package replay_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proctest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The replay publisher cannot open a channel: every channel its connection
// may have (channel_max, negotiated with RabbitMQ) is in use. The messages
// it was about to publish never left, so none of them is failed or
// unknown, none is counted as sent again (the unknown-outcome bound is not
// spent on them), and the task does not finish: it waits, running, and
// publishes each of them once, when a channel can be opened again.
func TestReplayWaitsForAChannel(t *testing.T) {
	t.Parallel()
	const n = 50
	b, q, logs := setupStarved(t, n)
	ctx := context.Background()

	release := b.holdEveryChannel(t)

	task, err := b.svc.Start(ctx, replay.Request{Filter: &store.Filter{SourceQueue: q}}, operator)
	require.NoError(t, err)
	var cur replay.Task
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		cur, err = b.svc.Get(ctx, task.ID)
		require.NoError(t, err)
		return strings.Contains(logs.String(), "cannot open a channel") || cur.Failed+cur.Unknown > 0 || store.TaskFinished(cur.Status)
	}, "the publisher never tried to open its channel: %+v", &cur)
	require.Zero(t, cur.Failed, "a message never sent is not failed: %+v", &cur)
	require.Zero(t, cur.Unknown)
	require.Zero(t, cur.Republished)
	require.Equal(t, replay.StatusRunning, cur.Status, "the task waits for a channel")
	require.Equal(t, int64(n), cur.Remaining)
	require.Zero(t, b.count(t, "last_replay_error IS NOT NULL"))

	release()
	final := b.waitTask(t, task.ID, 60*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(n), final.Published)
	require.Zero(t, final.Failed+final.Unknown+final.Republished+final.Remaining, "%+v", &final)
	require.Equal(t, replay.OutcomeAllPublished, final.Outcome)
	var unknowns int64
	require.NoError(t, b.db.QueryRow(ctx,
		`SELECT coalesce(sum(unknown_count), 0) FROM replay_task_items WHERE task_id = $1`, task.ID).Scan(&unknowns))
	require.Zero(t, unknowns, "the retry bound is for unknown outcomes: none was spent")
	require.Equal(t, n, b.count(t, "status = 'replayed' AND replay_count = 1 AND last_replay_error IS NULL"))
	per := b.countAtTarget(t, q)
	require.Len(t, per, n)
	for id, k := range per {
		require.Equal(t, 1, k, "message %d arrived %d times", id, k)
	}
	b.requireSummaryExact(t)
}

// The replay's Conn is closed for good while a task waits for a channel
// (its owner is stopping, or failed): the run ends and hands the task back,
// unsent messages neither failed nor unknown, and the instance takes no
// task again, rather than renew its claims and wait for ever on a Conn
// that never reopens, or take the task back at once, again and again.
func TestReplayHandsBackOnAClosedConn(t *testing.T) {
	t.Parallel()
	const n = 20
	b, q, logs := setupStarved(t, n)
	ctx := context.Background()
	b.holdEveryChannel(t)

	task, err := b.svc.Start(ctx, replay.Request{Filter: &store.Filter{SourceQueue: q}}, operator)
	require.NoError(t, err)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(logs.String(), "cannot open a channel")
	}, "the task never waited for a channel")

	b.conn.Close()
	var row store.ReplayTask
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		row, err = b.st.GetReplayTask(ctx, task.ID)
		require.NoError(t, err)
		return row.RunnerOwner == ""
	}, "the task was not handed back after its connection closed: %+v", &row)
	require.Equal(t, store.TaskRunning, row.Status, "handed back to be resumed, not finished")
	require.Contains(t, logs.String(), "takes no more replay tasks")
	cur, err := b.svc.Get(ctx, task.ID)
	require.NoError(t, err)
	require.Zero(t, cur.Failed+cur.Unknown+cur.Republished+cur.Published, "nothing was sent: %+v", &cur)
	require.Equal(t, int64(n), cur.Remaining)
	require.Zero(t, b.count(t, "status = 'replaying' OR last_replay_error IS NOT NULL"), "every message pending again, with no error")

	// Not taken again: the runner stays empty.
	acquired := strings.Count(logs.String(), "replay task running")
	require.Never(t, func() bool {
		row, err = b.st.GetReplayTask(ctx, task.ID)
		return err == nil && row.RunnerOwner != ""
	}, 2*time.Second, 100*time.Millisecond, "the instance took the task again on a closed connection")
	require.Equal(t, acquired, strings.Count(logs.String(), "replay task running"))
}

// holdEveryChannel opens every channel dlq's connection may open (its
// channel_max), so that its publisher can open none, and returns what
// closes them again (the test's end does too).
func (b *bundle) holdEveryChannel(t *testing.T) (release func()) {
	t.Helper()
	var held []*amqp.Channel
	for {
		ch, err := b.conn.Channel(context.Background())
		if err != nil {
			require.ErrorIs(t, err, amqp.ErrChannelMax)
			break
		}
		held = append(held, ch)
	}
	require.NotEmpty(t, held)
	var once sync.Once
	release = func() {
		once.Do(func() {
			for _, ch := range held {
				_ = ch.Close()
			}
		})
	}
	t.Cleanup(release)
	return release
}

// setupStarved sets up a replay service whose connection may open three
// channels, logging into logs, with n messages stored from queue q.
func setupStarved(t *testing.T, n int) (b *bundle, q string, logs *proctest.LockedBuffer) {
	t.Helper()
	logs = &proctest.LockedBuffer{}
	b = setup(t, func(o *setupOpts) {
		o.noConsumer, o.channelMax = true, 3
		o.logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	q = b.targetQueue(t)
	b.seed(t, q, n)
	return b, q, logs
}
