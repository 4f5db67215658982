package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

var replayActor = store.Actor{Name: "test", Role: "operator", Via: "test"}

// seedPending stores n pending messages of queue and returns their ids.
func seedPending(t *testing.T, st *store.Store, db *pgxpool.Pool, queue string, n int) []int64 {
	t.Helper()
	msgs := make([]store.NewMessage, n)
	for i := range msgs {
		msgs[i] = msg(queue, fmt.Sprintf("body %d", i), int64(i+1))
		msgs[i].FailureType = "Timeout"
		msgs[i].FailureMessage = "timed out"
	}
	for start := 0; start < n; start += 500 {
		ingest(t, st, msgs[start:min(start+500, n)]...)
	}
	ids := messageIDs(t, db, "source_queue = $1", queue)
	require.Len(t, ids, n)
	return ids
}

// seededStore is a test's own store, a pool on its schema, and the ids of
// n pending messages of the queue "orders" stored in it.
func seededStore(t *testing.T, n int) (*store.Store, *pgxpool.Pool, []int64) {
	t.Helper()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	return st, db, seedPending(t, st, db, "orders", n)
}

func newTask(t *testing.T, st *store.Store, f store.Filter) store.ReplayTask {
	t.Helper()
	task, err := st.CreateReplayTask(context.Background(), store.NewReplayTask{
		Selection: f, MaxItems: 1_000_000, Request: json.RawMessage(`{}`), Actor: replayActor,
	})
	require.NoError(t, err)
	return task
}

// runner is a claimer that owns a task, as replay's runner does.
func acquire(t *testing.T, db *pgxpool.Pool, id int64, owner string) {
	t.Helper()
	_, err := db.Exec(context.Background(), `UPDATE replay_tasks SET runner_owner = $2, status = 'running' WHERE id = $1`, id, owner)
	require.NoError(t, err)
}

// Many claimers on tasks over the same rows: every row is claimed, and
// settled as published, exactly once.
func TestReplayClaimsAreExclusive(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	const rows, tasks, claimersPerTask = 2000, 3, 3
	seedPending(t, st, db, "orders", rows)
	var mu sync.Mutex
	claimedBy := map[int64]string{}
	var wg sync.WaitGroup
	var all []store.ReplayTask
	for k := 0; k < tasks; k++ {
		task := newTask(t, st, store.Filter{SourceQueue: "orders"})
		require.Equal(t, int64(rows), task.Requested)
		all = append(all, task)
	}
	for _, task := range all {
		for c := 0; c < claimersPerTask; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				var cursor int64
				for i := 0; ; i++ {
					token := fmt.Sprintf("t%d-c%d-%d", task.ID, c, i)
					res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{
						TaskID: task.ID, Token: token, Lease: time.Minute, After: cursor, Limit: 50, MaxReplays: 5,
					})
					if err != nil {
						t.Error(err)
						return
					}
					var outs []store.ReplayOutcome
					mu.Lock()
					for _, m := range res.Messages {
						if prev, dup := claimedBy[m.ID]; dup {
							t.Errorf("message %d claimed by %s and %s", m.ID, prev, token)
						}
						claimedBy[m.ID] = token
						outs = append(outs, store.ReplayOutcome{ID: m.ID, Token: token, Result: store.OutcomePublished})
					}
					mu.Unlock()
					if _, err := st.SettleReplayOutcomes(ctx, task.ID, outs, false); err != nil {
						t.Error(err)
						return
					}
					cursor = res.Last
					if res.Scanned < 50 {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	require.Len(t, claimedBy, rows)
	require.Equal(t, rows, count(t, db, "status = 'replayed' AND replay_count = 1"))
	var published int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT sum(published) FROM replay_tasks`).Scan(&published))
	require.Equal(t, int64(rows), published)
	requireCountersConsistent(t, db)
}

// A claim whose lease ran out is taken back: rows its holder may have
// published (up to its write-ahead mark) as unknown, the others as not done
// yet. The former holder can no longer settle them (fencing), and its task
// never claims an unknown one again.
func TestReplayLeaseRecoveryFencesTheFormerHolder(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 4)
	ctx := context.Background()
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "old", Lease: 50 * time.Millisecond, Limit: 10, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 4)
	// The holder got as far as announcing the first three.
	require.NoError(t, st.MarkReplayClaim(ctx, task.ID, "old", ids[2]))
	// One settles in time.
	_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[0], Token: "old", Result: store.OutcomePublished}}, false)
	require.NoError(t, err)

	dlqtest.Eventually(t, 5*time.Second, func() bool {
		got, err := st.RecoverExpiredReplayClaims(ctx, 100)
		require.NoError(t, err)
		if got.Taken > 0 {
			require.Equal(t, int64(3), got.Taken)
			require.Equal(t, int64(2), got.Unknown)
			require.Zero(t, got.Retried, "a task that holds unknown outcomes")
		}
		return got.Taken > 0
	}, "expired claims not taken back")
	require.Equal(t, 2, count(t, db, "status = 'pending' AND last_replay_error = $1 AND claim_owner IS NULL", store.UnknownOutcomeLeaseExpired))
	require.Equal(t, 1, count(t, db, "id = $1 AND status = 'pending' AND last_replay_error IS NULL", ids[3]), "never published: no error")

	// The former holder comes back with its confirms: nothing changes.
	s, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
		{ID: ids[1], Token: "old", Result: store.OutcomePublished},
		{ID: ids[2], Token: "old", Result: store.OutcomeFailed, Error: "late"},
	}, false)
	require.NoError(t, err)
	require.Zero(t, s.Marked)
	require.Zero(t, s.Published+s.Failed)
	require.Equal(t, 3, count(t, db, "status = 'pending' AND replay_count = 0"))

	got, err := st.GetReplayTask(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Published)
	require.Equal(t, int64(2), got.Unknown)
	require.Equal(t, int64(1), got.Remaining())
	// The task claims only the message that was never published.
	res, err = st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "new", Lease: time.Minute, Limit: 10, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)
	require.Equal(t, ids[3], res.Messages[0].ID)
	var marks int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM replay_claims WHERE token = 'old'`).Scan(&marks))
	require.Zero(t, marks, "the dead claim's mark is gone")
	requireCountersConsistent(t, db)
}

// A replayed message that died again and came back to its row before the
// replay was recorded keeps what the consumer wrote: pending, with the
// replay count of the header.
func TestReplaySettleKeepsAMessageThatDiedAgainFirst(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 1)
	ctx := context.Background()
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "tok", Lease: time.Minute, Limit: 10, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)

	back := msg("orders", "body 0", 999)
	back.DLQID, back.ReplayID, back.ReplayCount, back.Redelivered = ids[0], "rid-1", 1, false
	back.Reason = "expired"
	_, r := ingest(t, st, back)
	require.Equal(t, 1, r.Returned)

	s, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[0], Token: "tok", Result: store.OutcomePublished}}, false)
	require.NoError(t, err)
	require.Zero(t, s.Marked, "the row had already changed")
	require.Equal(t, int64(1), s.Published, "the task still counts the confirmed publish")
	st0 := rowState(t, db, ids[0])
	require.Equal(t, "pending", st0.status)
	require.Equal(t, "expired", st0.reason)
	require.Equal(t, 1, st0.replayCount)
	requireCountersConsistent(t, db)
}

// A claim clears the ingest batch of a row whose batch has left
// ingest_inflight (so neither replay rewrite enters the redelivery-match
// index), and keeps it while the batch is in flight: a redelivery of that
// batch, during the replay or after it, is still recognised as the same
// message.
func TestReplayClaimKeepsRedeliveryMatching(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	confirmed, _ := ingest(t, st, msg("orders", "a", 41), msg("orders", "b", 42))
	require.NoError(t, st.ConfirmBatches(ctx, []int64{confirmed}))
	inflight, _ := ingest(t, st, msg("orders", "c", 43))
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "tok", Lease: time.Minute, Limit: 10, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 3)
	require.Equal(t, 2, count(t, db, "fingerprint IN (41, 42) AND status = 'replaying' AND ingest_batch IS NULL"),
		"a confirmed batch no longer matters to a replayed row")
	require.Equal(t, 1, count(t, db, "fingerprint = 43 AND status = 'replaying' AND ingest_batch = $1", inflight),
		"a batch in flight stays on its rows")

	// The unconfirmed batch's ack was lost: its message comes back while it
	// is being replayed, and is the same message.
	re := msg("orders", "c", 43)
	re.Redelivered = true
	absorbing, r := ingest(t, st, re)
	require.Equal(t, 1, r.Duplicates)

	outs := make([]store.ReplayOutcome, len(res.Messages))
	for i, m := range res.Messages {
		outs[i] = store.ReplayOutcome{ID: m.ID, Token: "tok", Result: store.OutcomePublished}
	}
	s, err := st.SettleReplayOutcomes(ctx, task.ID, outs, false, "tok")
	require.NoError(t, err)
	require.Equal(t, int64(3), s.Marked)
	require.Equal(t, 1, count(t, db, "fingerprint = 43 AND status = 'replayed' AND ingest_batch = $1", absorbing))
	// And again after the replay, while the absorbing batch is unconfirmed.
	_, r = ingest(t, st, re)
	require.Equal(t, 1, r.Duplicates)
	require.Equal(t, 3, count(t, db, "source_queue = 'orders'"))
	requireCountersConsistent(t, db)
}

// Settling a batch of items updates each of them on its own page (a HOT
// update: no new primary key entry), even when every item of the page is
// settled in one transaction.
func TestReplaySettlementKeepsItemsOnTheirPages(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 500)
	ctx := context.Background()
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	blocks := func() map[int64]string {
		rows, err := db.Query(ctx, `SELECT message_id, (ctid::text::point)[0]::text FROM replay_task_items WHERE task_id = $1`, task.ID)
		require.NoError(t, err)
		out := map[int64]string{}
		for rows.Next() {
			var id int64
			var block string
			require.NoError(t, rows.Scan(&id, &block))
			out[id] = block
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := blocks()
	require.Len(t, before, len(ids))
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "tok", Lease: time.Minute, Limit: 500, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, len(ids))
	outs := make([]store.ReplayOutcome, len(res.Messages))
	for i, m := range res.Messages {
		outs[i] = store.ReplayOutcome{ID: m.ID, Token: "tok", Result: store.OutcomePublished}
	}
	s, err := st.SettleReplayOutcomes(ctx, task.ID, outs, false, "tok")
	require.NoError(t, err)
	require.Equal(t, int64(len(ids)), s.Published)
	after := blocks()
	moved := 0
	for id, b := range before {
		if after[id] != b {
			moved++
		}
	}
	require.Zero(t, moved, "settled items that left their page")
	requireCountersConsistent(t, db)
}

// The snapshot is taken when the task is created: later arrivals are not
// in it. The loop guard and non-pending messages are skipped with reasons.
func TestReplaySnapshotAndSkips(t *testing.T) {
	t.Parallel()
	st, db, ids := seededStore(t, 4)
	ctx := context.Background()
	_, err := db.Exec(ctx, `UPDATE dead_messages SET replay_count = 5 WHERE id = $1`, ids[1])
	require.NoError(t, err)
	_, err = st.Acknowledge(ctx, store.Filter{IDs: []int64{ids[2]}}, replayActor, store.ActionOptions{})
	require.NoError(t, err)
	task, err := st.CreateReplayTask(ctx, store.NewReplayTask{
		Selection: store.Filter{IDs: ids, Status: "all"}, MaxItems: 100, Request: json.RawMessage(`{}`), Actor: replayActor,
	})
	require.NoError(t, err)
	require.Equal(t, int64(4), task.Requested)
	seedPending(t, st, db, "later", 2)

	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "tok", Lease: time.Minute, Limit: 100, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 2)
	require.Equal(t, 2, res.Skipped)
	var details []string
	rows, err := db.Query(ctx, `SELECT detail FROM replay_task_items WHERE task_id = $1 AND outcome = 'skipped' ORDER BY message_id`, task.ID)
	require.NoError(t, err)
	for rows.Next() {
		var d string
		require.NoError(t, rows.Scan(&d))
		details = append(details, d)
	}
	require.Len(t, details, 2)
	require.Contains(t, details[0], "max_replays 5")
	require.Contains(t, details[1], "status is acknowledged")

	// A claim's bodies are bounded: "body 0" is 6 bytes, so 10 bytes hold
	// one message, and the rest remains.
	bounded, err := st.CreateReplayTask(ctx, store.NewReplayTask{
		Selection: store.Filter{SourceQueue: "later"}, MaxItems: 100, Request: json.RawMessage(`{}`), Actor: replayActor,
	})
	require.NoError(t, err)
	items, more, err := st.ReplayItemsAfter(ctx, bounded.ID, 0, 100, 10, 0)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.True(t, more)
	items, more, err = st.ReplayItemsAfter(ctx, bounded.ID, 0, 100, 0, 0)
	require.NoError(t, err)
	require.Len(t, items, 2)
	require.False(t, more)

	// Force lifts the guard.
	forced, err := st.CreateReplayTask(ctx, store.NewReplayTask{
		Selection: store.Filter{IDs: ids[1:2], Status: "all"}, MaxItems: 100, Request: json.RawMessage(`{}`), Force: true, Actor: replayActor,
	})
	require.NoError(t, err)
	res, err = st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: forced.ID, Token: "tok2", Lease: time.Minute, Limit: 100, MaxReplays: 5, Force: true})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)

	// A selection that matches nothing, or too much, records nothing.
	_, err = st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{SourceQueue: "none"}, MaxItems: 100, Request: json.RawMessage(`{}`), Actor: replayActor})
	require.ErrorIs(t, err, store.ErrEmptySelection)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{SourceQueue: "later"}, MaxItems: 1, Request: json.RawMessage(`{}`), Actor: replayActor})
	require.ErrorIs(t, err, store.ErrSelectionTooLarge)
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM replay_tasks`).Scan(&n))
	require.Equal(t, 3, n)
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'replay'`).Scan(&n))
	require.Equal(t, 3, n, "one audit row per task, written with it")
	requireCountersConsistent(t, db)
}

// A repeated command_id finds the first answer; a reservation whose
// handler died is taken over after its lease.
func TestControlCommandMemory(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	r, err := st.ReserveCommand(ctx, "c1", "acknowledge", "ops", time.Minute)
	require.NoError(t, err)
	require.True(t, r.Reserved)
	r, err = st.ReserveCommand(ctx, "c1", "acknowledge", "ops", time.Minute)
	require.NoError(t, err)
	require.True(t, r.Running)
	require.NoError(t, st.SaveCommandAnswer(ctx, "c1", `{"ok":true}`))
	r, err = st.ReserveCommand(ctx, "c1", "acknowledge", "ops", time.Minute)
	require.NoError(t, err)
	require.False(t, r.Reserved)
	require.Equal(t, `{"ok":true}`, r.Answer)

	r, err = st.ReserveCommand(ctx, "c2", "delete", "ops", 10*time.Millisecond)
	require.NoError(t, err)
	require.True(t, r.Reserved)
	r = takeOverCommand(ctx, t, st, "c2", "delete")

	n, err := st.DeleteExpiredControlCommands(ctx, time.Now().Add(time.Hour), 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the answered command is old and done")
}

// TestControlCommandLateHolder: a handler whose reservation lapsed and was
// taken over by a repeat can no longer renew or forget it. Its late
// ForgetCommand deleted the repeat's reservation, and a third delivery
// then ran the command beside the repeat; its late RenewCommand extended
// it. Its late answer is still recorded: it ran the command.
func TestControlCommandLateHolder(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	a, err := st.ReserveCommand(ctx, "late-1", "acknowledge", "ops", 10*time.Millisecond)
	require.NoError(t, err)
	require.True(t, a.Reserved)
	var b store.CommandReservation
	b = takeOverCommand(ctx, t, st, "late-1", "acknowledge")
	reservedUntil := func() time.Time {
		var until time.Time
		require.NoError(t, db.QueryRow(ctx, `SELECT reserved_until FROM control_commands WHERE command_id = 'late-1'`).Scan(&until))
		return until
	}
	taken := reservedUntil()

	_, held, err := st.RenewCommand(ctx, "late-1", a.Hold, time.Hour)
	require.NoError(t, err)
	require.False(t, held, "the late holder renewed the repeat's reservation")
	require.Equal(t, taken, reservedUntil(), "the late holder's renewal changed the repeat's reservation")
	forgot, err := st.ForgetCommand(ctx, "late-1", a.Hold)
	require.NoError(t, err)
	require.False(t, forgot)
	c, err := st.ReserveCommand(ctx, "late-1", "acknowledge", "ops", time.Minute)
	require.NoError(t, err)
	require.True(t, c.Running, "a third delivery reserved the command the repeat holds: %+v", c)

	// The repeat renews and forgets its own. A hold it renewed since, but
	// has not lapsed, is still its own: a renewal that committed without
	// its answer reaching the caller leaves it with that hold, and the
	// row's cannot have been taken over before it lapses.
	next, held, err := st.RenewCommand(ctx, "late-1", b.Hold, time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	_, held, err = st.RenewCommand(ctx, "late-1", b.Hold, time.Minute)
	require.NoError(t, err)
	require.True(t, held, "a renewal whose answer was lost made the holder give up its own reservation")
	// A handler of an earlier release renews by command id alone.
	_, err = db.Exec(ctx, `UPDATE control_commands SET reserved_until = now() + interval '1 minute' WHERE command_id = 'late-1'`)
	require.NoError(t, err)
	_, held, err = st.RenewCommand(ctx, "late-1", next, time.Minute)
	require.NoError(t, err)
	require.True(t, held, "an earlier release's renewal made the holder give up its own reservation")
	forgot, err = st.ForgetCommand(ctx, "late-1", next)
	require.NoError(t, err)
	require.True(t, forgot)

	// A late answer is the command's first.
	a, err = st.ReserveCommand(ctx, "late-2", "acknowledge", "ops", 10*time.Millisecond)
	require.NoError(t, err)
	require.True(t, a.Reserved)
	b = takeOverCommand(ctx, t, st, "late-2", "acknowledge")
	require.NoError(t, st.SaveCommandAnswer(ctx, "late-2", `{"first":true}`))
	require.NoError(t, st.SaveCommandAnswer(ctx, "late-2", `{"second":true}`))
	forgot, err = st.ForgetCommand(ctx, "late-2", b.Hold)
	require.NoError(t, err)
	require.False(t, forgot, "an answered command was forgotten")
	c, err = st.ReserveCommand(ctx, "late-2", "acknowledge", "ops", time.Minute)
	require.NoError(t, err)
	require.Equal(t, `{"first":true}`, c.Answer)
}

// TestControlRenewAfterOwnAnswer: a replay command saves its answer inside
// the transaction that creates its task, before its handler returns, so a
// renewal can find it answered. Under the caller's unlapsed hold the
// answer is its own (ErrCommandAnswered: no warning that it may run
// twice); once the hold lapsed, a repeat may have taken it over and
// answered, and the renewal says only that it is not held.
func TestControlRenewAfterOwnAnswer(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	a, err := st.ReserveCommand(ctx, "own-1", "replay", "ops", time.Minute)
	require.NoError(t, err)
	require.True(t, a.Reserved)
	require.NoError(t, st.SaveCommandAnswer(ctx, "own-1", `{"task_id":1}`))
	_, held, err := st.RenewCommand(ctx, "own-1", a.Hold, time.Minute)
	require.ErrorIs(t, err, store.ErrCommandAnswered)
	require.False(t, held)

	l, err := st.ReserveCommand(ctx, "own-2", "replay", "ops", 10*time.Millisecond)
	require.NoError(t, err)
	require.True(t, l.Reserved)
	b := takeOverCommand(ctx, t, st, "own-2", "replay")
	require.NoError(t, st.SaveCommandAnswer(ctx, "own-2", `{"task_id":2}`))
	_, held, err = st.RenewCommand(ctx, "own-2", l.Hold, time.Minute)
	require.NoError(t, err, "a lapsed holder was told the answer was its own")
	require.False(t, held)
	_, held, err = st.RenewCommand(ctx, "own-2", b.Hold, time.Minute)
	require.ErrorIs(t, err, store.ErrCommandAnswered)
	require.False(t, held)
}

// takeOverCommand reserves command id once its lapsing reservation (a
// lease of milliseconds) lets a repeat take it over, for a minute.
func takeOverCommand(ctx context.Context, t *testing.T, st *store.Store, id, command string) store.CommandReservation {
	t.Helper()
	var r store.CommandReservation
	dlqtest.Eventually(t, 5*time.Second, func() bool {
		var err error
		r, err = st.ReserveCommand(ctx, id, command, "ops", time.Minute)
		require.NoError(t, err)
		return r.Reserved
	}, "the lapsed reservation of %s was not taken over", id)
	return r
}
