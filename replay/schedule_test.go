package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// start_at is checked against the clock and against delay_seconds.
func TestRequestStartAtValidation(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	for _, c := range []struct {
		name  string
		req   replay.Request
		valid bool
	}{
		{"in an hour", replay.Request{IDs: []int64{1}, StartAt: at(time.Hour)}, true},
		{"just now, clocks apart", replay.Request{IDs: []int64{1}, StartAt: at(-30 * time.Second)}, true},
		{"in 30 days", replay.Request{IDs: []int64{1}, StartAt: at(30 * 24 * time.Hour)}, true},
		{"an hour ago", replay.Request{IDs: []int64{1}, StartAt: at(-time.Hour)}, false},
		{"beyond 30 days", replay.Request{IDs: []int64{1}, StartAt: at(30*24*time.Hour + time.Second)}, false},
		{"with a delay", replay.Request{IDs: []int64{1}, StartAt: at(time.Hour), DelaySeconds: 5}, false},
	} {
		err := c.req.Validate(100, now)
		if c.valid {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorIs(t, err, replay.ErrInvalidRequest, c.name)
		require.Contains(t, err.Error(), "start_at", c.name)
	}
}

// A replay scheduled with start_at through the control queue is listed
// as scheduled with that time, refused with delay_seconds or in the past,
// refused on commands that do not replay, and cancellable before it runs.
func TestControlReplayStartAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	ids := b.seed(t, q, 3)
	ops := b.client(t, b.control(t), operatorToken)

	at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	task := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"at-1","ids":[%d,%d],"start_at":%q}`,
		ids[0], ids[1], at.Format(time.RFC3339))))
	require.Equal(t, replay.StatusScheduled, task.Status)
	require.True(t, at.Equal(task.StartAt), "start_at %s, task starts %s", at, task.StartAt)
	require.NotNil(t, task.Request.StartAt)
	require.True(t, at.Equal(*task.Request.StartAt), "the request as accepted keeps start_at")

	list := call(t, ops, `{"command":"list_replays","command_id":"at-list"}`)
	requireOK(t, list)
	require.Contains(t, string(list.Result), fmt.Sprintf(`"id":%d,"status":"scheduled"`, task.ID))

	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for name, body := range map[string]string{
		"with delay":     fmt.Sprintf(`{"command":"replay","command_id":"at-2","ids":[%d],"start_at":%q,"delay_seconds":60}`, ids[2], at.Format(time.RFC3339)),
		"in the past":    fmt.Sprintf(`{"command":"replay","command_id":"at-3","ids":[%d],"start_at":%q}`, ids[2], past),
		"not a time":     fmt.Sprintf(`{"command":"replay","command_id":"at-4","ids":[%d],"start_at":"tonight"}`, ids[2]),
		"on acknowledge": fmt.Sprintf(`{"command":"acknowledge","command_id":"at-5","ids":[%d],"start_at":%q}`, ids[2], at.Format(time.RFC3339)),
	} {
		a := call(t, ops, body)
		require.False(t, a.OK, name)
		require.Contains(t, []string{control.CodeInvalidRequest, control.CodeInvalidJSON}, a.Error.Code, "%s: %+v", name, a.Error)
	}

	cancelled := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"cancel_replay","command_id":"at-6","id":%d}`, task.ID)))
	require.Equal(t, replay.StatusCancelled, cancelled.Status)
	require.Equal(t, 3, b.count(t, "id = ANY($1) AND status = 'pending'", ids), "nothing was replayed")
	require.Zero(t, dlqtest.QueueDepth(t, b.app, q))
}

// A replay scheduled for an absolute time is a row: it is still there
// after the dlq serve that accepted it is killed, and the next one fires
// it at its time, not before.
func TestScheduledReplaySurvivesRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noService, o.noConsumer = true, true })
	q := b.targetQueue(t)
	const n = 20
	b.seed(t, q, n)
	ctlQueue := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, b.app, ctlQueue)
	first := b.serve(t, ctlQueue)
	c := b.waitAnswering(t, ctlQueue)

	startAt := time.Now().Add(8 * time.Second).UTC().Truncate(time.Millisecond)
	task := taskOf(t, call(t, c, fmt.Sprintf(`{"command":"replay","command_id":"restart-at","filter":{"source_queue":%q},"start_at":%q}`,
		q, startAt.Format(time.RFC3339Nano))))
	require.Equal(t, replay.StatusScheduled, task.Status)
	require.True(t, startAt.Equal(task.StartAt), "start_at %s, task starts %s", startAt, task.StartAt)

	first.kill()
	require.Zero(t, dlqtest.QueueDepth(t, b.app, q), "nothing published before start_at")
	b.serve(t, ctlQueue)
	b.waitAnswering(t, ctlQueue)

	final := b.waitTask(t, task.ID, 90*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(n), final.Published)
	var startedAt, storedStart time.Time
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT started_at, start_at FROM replay_tasks WHERE id = $1`, task.ID).Scan(&startedAt, &storedStart))
	require.True(t, storedStart.Equal(startAt), "stored start_at %s", storedStart)
	require.False(t, startedAt.Before(startAt), "started %s, before its start_at %s", startedAt, startAt)
	require.Equal(t, n, len(b.countAtTarget(t, q)))
}

// dlq replay takes --start-at (not with --delay) and --field.
func TestReplayCLIStartAtAndField(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noService, o.noConsumer = true, true })
	q := b.targetQueue(t)
	now := time.Now().UTC()
	var msgs []store.NewMessage
	for i, body := range []string{`{"tier":"gold"}`, `{"tier":"silver"}`, `{"tier":"gold","vip":true}`} {
		msgs = append(msgs, store.NewMessage{
			SourceQueue: q, SourceRoutingKey: q, DeadLetterQueue: b.queue, Reason: "rejected", DeathCount: 1,
			Properties: []byte(`{"delivery_mode":2}`), Headers: []byte(`{}`),
			Body: []byte(body), FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1),
		})
	}
	_, err := b.st.IngestBatch(context.Background(), store.IngestBatch{ID: store.NewBatchID(), Consumer: "seed", Messages: msgs})
	require.NoError(t, err)
	ids := b.ids(t, "source_queue = $1", q)
	ctlQueue := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, b.app, ctlQueue)
	b.serve(t, ctlQueue)
	b.waitAnswering(t, ctlQueue)

	code, out, errOut := b.cli(t, ctlQueue, adminToken, "replay", "--source-queue", q, "--field", "tier=gold", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "dry run: 2 messages match")

	at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	code, out, errOut = b.cli(t, ctlQueue, adminToken, "replay", fmt.Sprint(ids[1]), "--start-at", at.Format(time.RFC3339), "--json")
	require.Equal(t, 0, code, errOut)
	var task replay.Task
	require.NoError(t, json.Unmarshal([]byte(out), &task), out)
	require.Equal(t, replay.StatusScheduled, task.Status)
	require.True(t, at.Equal(task.StartAt), "starts %s", task.StartAt)
	code, out, errOut = b.cli(t, ctlQueue, adminToken, "replays")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "scheduled")

	for _, args := range [][]string{
		{"replay", fmt.Sprint(ids[0]), "--start-at", "tonight"},
		{"replay", fmt.Sprint(ids[0]), "--start-at", at.Format(time.RFC3339), "--delay", "1m"},
		{"replay", fmt.Sprint(ids[0]), "--start-at", time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)},
		{"replay", "--field", "tier=gold"},
	} {
		code, _, errOut := b.cli(t, ctlQueue, adminToken, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
	}
}
