package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// Tests of the lock order of store/doc.go ("Lock order"). Most line up
// two transactions behind a replay task's row the test holds, in the
// order that closes a cycle if their lock orders differ, then let them
// go: PostgreSQL then finds the deadlock and aborts one (40P01); with one
// order, both commit. One runs recoveries and settlements side by side,
// round after round.

// watchedStore opens a store on dsn (sealing with ring, nil: plain) whose
// connections carry an application_name of their own, so that the test
// sees them wait for locks (waiters), and a short deadlock_timeout, so
// that a deadlock is found at once.
func watchedStore(t *testing.T, dsn string, ring *crypt.Ring) (*store.Store, string) {
	t.Helper()
	app := dlqtest.Name(t, "lock")
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", app)
	q.Set("deadlock_timeout", "20ms")
	u.RawQuery = q.Encode()
	return openStore(t, u.String(), ring, nil), app
}

// waiters waits until n of app's connections wait for a lock.
func waiters(t *testing.T, db *pgxpool.Pool, app string, n int) {
	t.Helper()
	dlqtest.Eventually(t, 5*time.Second, func() bool { return lockWaits(t, db, app) >= n },
		"%d transactions of %s waiting for a lock", n, app)
}

// holdTask locks a replay task's row in a transaction of the test's, as
// any writer of the task would, until the test commits it.
func holdTask(ctx context.Context, t *testing.T, db *pgxpool.Pool, taskID int64) pgx.Tx {
	t.Helper()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `SELECT 1 FROM replay_tasks WHERE id = $1 FOR NO KEY UPDATE`, taskID)
	require.NoError(t, err)
	return tx
}

// inBackground runs f in a goroutine; the channel gets its error.
func inBackground(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

// requireNoDeadlock fails the test if err is anything, saying so plainly
// when it is PostgreSQL's deadlock_detected.
func requireNoDeadlock(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
		t.Fatalf("%s: PostgreSQL aborted it to break a deadlock: %v", what, err)
	}
	require.NoError(t, err, what)
}

// Two instances take back expired claims of the same two tasks at once,
// each its own rows (SKIP LOCKED): the first's rows may have been
// published for task 1 only, the second's for task 2 only. Recovery
// settled the items of those, writing that task's counters, before it
// handed every row back to its task, writing all of them: the first held
// task 1 and waited for task 2, the second the other way round.
func TestClaimRecoveriesLockTasksInOneOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ids := seedPending(t, st, db, "orders", 4)
	t1 := newTask(t, st, store.Filter{SourceQueue: "orders"})
	t2 := newTask(t, st, store.Filter{SourceQueue: "orders"})
	// One claim per row, so that each row has the write-ahead mark it
	// needs: the first recovery takes the two lowest ids, the second the
	// two others.
	for i, c := range []struct {
		task   int64
		marked bool // may have been published
	}{{t1.ID, true}, {t2.ID, false}, {t1.ID, false}, {t2.ID, true}} {
		mark := 0
		if c.marked {
			mark = 1
		}
		res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: c.task, Token: fmt.Sprintf("c%d", i), Lease: time.Minute,
			IDs: ids[i : i+1], MaxReplays: 5, MarkFirst: mark})
		require.NoError(t, err)
		require.Len(t, res.Messages, 1)
	}
	// Their holders stopped: the leases ran out.
	_, err := db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 minute' WHERE status = 'replaying'`)
	require.NoError(t, err)

	rec, app := watchedStore(t, dsn, nil)
	hold := holdTask(ctx, t, db, t1.ID)
	var first, second store.RecoveredClaims
	firstDone := inBackground(func() (err error) { first, err = rec.RecoverExpiredReplayClaims(ctx, 2); return err })
	waiters(t, db, app, 1) // on task 1, holding rows 0 and 1
	secondDone := inBackground(func() (err error) { second, err = rec.RecoverExpiredReplayClaims(ctx, 2); return err })
	waiters(t, db, app, 2) // on task 1 too, holding rows 2 and 3
	require.NoError(t, hold.Commit(ctx))
	requireNoDeadlock(t, <-firstDone, "first recovery")
	requireNoDeadlock(t, <-secondDone, "second recovery")

	require.Equal(t, int64(2), first.Taken)
	require.Equal(t, int64(2), second.Taken)
	require.Equal(t, int64(2), first.Unknown+first.Retried+second.Unknown+second.Retried, "the two marked rows")
	require.Zero(t, count(t, db, "status = 'replaying'"))
	requireTaskAddsUp(t, st, db, t1.ID, "task 1 after both recoveries")
	requireTaskAddsUp(t, st, db, t2.ID, "task 2 after both recoveries")
	requireCountersConsistent(t, db)
}

// Claims of three tasks over the same messages, most of them stalled
// (their leases run out at once) and some live: three recoveries take the
// stalled ones back, in small batches, while the live ones settle, again
// and again. No transaction may fail; before the tasks were locked in one
// order, every run ended in deadlock_detected within some 20 rounds.
func TestClaimRecoveriesAndSettlementsRunTogether(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ids := seedPending(t, st, db, "orders", 24)
	rec, _ := watchedStore(t, dsn, nil)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var tasks []int64
	for round := range 40 {
		// A deadline per round, not for all 40: a round takes some 30 ms
		// on an idle host, and one minute for the whole test ran out on a
		// loaded CI host. A round that hangs on a lock still fails here.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		live, roundTasks := stallClaims(ctx, t, st, db, rng, ids, round)
		tasks = append(tasks, roundTasks...)
		for _, err := range recoverAndSettle(ctx, rec, live) {
			requireNoDeadlock(t, err, fmt.Sprintf("round %d (seed %d)", round, seed))
		}
		cancel()
		require.Zero(t, count(t, db, "status = 'replaying'"), "round %d: every claim taken back or settled", round)
	}
	for _, id := range tasks {
		requireTaskAddsUp(t, st, db, id, fmt.Sprintf("task %d", id))
	}
	requireCountersConsistent(t, db)
}

// liveClaim is a claim whose holder settles it.
type liveClaim struct {
	task  int64
	token string
	ids   []int64
}

// stallClaims makes a round's three tasks over ids, claims ids in six
// claims of four, each for a task picked at random with a random
// write-ahead mark, and lets the leases of four of them run out. It
// returns the two others and the tasks.
func stallClaims(ctx context.Context, t *testing.T, st *store.Store, db *pgxpool.Pool, rng *rand.Rand, ids []int64, round int) ([]liveClaim, []int64) {
	t.Helper()
	var tasks []int64
	for range 3 {
		tasks = append(tasks, newTask(t, st, store.Filter{SourceQueue: "orders"}).ID)
	}
	perm := rng.Perm(len(ids))
	var live []liveClaim
	var stalled []string
	for c := range 6 {
		var take []int64
		for _, p := range perm[c*4 : c*4+4] {
			take = append(take, ids[p])
		}
		cl := liveClaim{task: tasks[rng.IntN(len(tasks))], token: fmt.Sprintf("r%d-c%d", round, c)}
		res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: cl.task, Token: cl.token, Lease: time.Minute,
			IDs: take, MaxReplays: 1000, MarkFirst: rng.IntN(len(take) + 1)})
		require.NoError(t, err)
		for _, m := range res.Messages {
			cl.ids = append(cl.ids, m.ID)
		}
		if c%3 == 0 {
			live = append(live, cl)
		} else {
			stalled = append(stalled, cl.token)
		}
	}
	_, err := db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 minute' WHERE token = ANY($1)`, stalled)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 minute' WHERE claim_owner = ANY($1)`, stalled)
	require.NoError(t, err)
	return live, tasks
}

// recoverAndSettle runs three recoveries, each until it finds nothing
// more to take back, beside the settlements of the live claims (one
// failed outcome each, the rest handed back), and returns their errors.
func recoverAndSettle(ctx context.Context, st *store.Store, live []liveClaim) []error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	for _, limit := range []int{2, 3, 5} {
		wg.Go(func() {
			for {
				got, err := st.RecoverExpiredReplayClaims(ctx, limit)
				if err != nil {
					note(err)
					return
				}
				if got.Taken == 0 {
					return
				}
			}
		})
	}
	for _, cl := range live {
		wg.Go(func() {
			outs := make([]store.ReplayOutcome, len(cl.ids))
			for i, id := range cl.ids {
				outs[i] = store.ReplayOutcome{ID: id, Token: cl.token, Result: store.OutcomeReleased}
			}
			if len(outs) > 0 {
				outs[0].Result, outs[0].Error = store.OutcomeFailed, "nack"
			}
			if _, err := st.SettleReplayOutcomes(ctx, cl.task, outs, false, cl.token); err != nil {
				note(err)
			}
		})
	}
	wg.Wait()
	return errs
}

// While recovery takes back expired claims of two tasks, replayed copies
// of messages that other claims of the same tasks hold die again and come
// back: ingest takes those rows out of the tasks' claimed counts. An
// UPDATE ... FROM of several tasks visits them in whatever order its plan
// reads replay_tasks (a small table's sequential scan: where their latest
// versions lie, not id order); recovery holding the first task by id and
// waiting for the second, ingest the other way round, deadlocked.
func TestIngestReturnsLockTasksInRecoveryOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ids := seedPending(t, st, db, "orders", 4)
	t1 := newTask(t, st, store.Filter{SourceQueue: "orders"})
	t2 := newTask(t, st, store.Filter{SourceQueue: "orders"})
	// Rows 0 and 1 under claims that run out, 2 and 3 under live ones.
	for i, task := range []int64{t1.ID, t2.ID, t1.ID, t2.ID} {
		res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task, Token: fmt.Sprintf("c%d", i), Lease: time.Minute,
			IDs: ids[i : i+1], MaxReplays: 5})
		require.NoError(t, err)
		require.Len(t, res.Messages, 1)
	}
	_, err := db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 minute' WHERE token IN ('c0', 'c1')`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 minute' WHERE claim_owner IN ('c0', 'c1')`)
	require.NoError(t, err)
	// Task 1's latest version lies after task 2's, as an update leaves it.
	dlqtest.Eventually(t, 5*time.Second, func() bool {
		var after bool
		require.NoError(t, db.QueryRow(ctx, `
WITH u AS (UPDATE replay_tasks SET updated_at = now() WHERE id = $1 RETURNING ctid)
SELECT u.ctid > t.ctid FROM u, replay_tasks t WHERE t.id = $2`, t1.ID, t2.ID).Scan(&after))
		return after
	}, "task 1's row after task 2's in the table")

	rec, app := watchedStore(t, dsn, nil)
	hold := holdTask(ctx, t, db, t1.ID)
	var recovered store.RecoveredClaims
	recoveryDone := inBackground(func() (err error) { recovered, err = rec.RecoverExpiredReplayClaims(ctx, 10); return err })
	waiters(t, db, app, 1) // on task 1, holding rows 0 and 1
	var back []store.NewMessage
	for i, id := range ids[2:] {
		m := msg("orders", fmt.Sprintf("body %d", i+2), int64(900+i))
		m.DLQID, m.ReplayID, m.ReplayCount, m.Reason = id, fmt.Sprintf("rid-%d", i), 1, "expired"
		back = append(back, m)
	}
	var ingested store.IngestResult
	ingestDone := inBackground(func() (err error) {
		ingested, err = rec.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: back})
		return err
	})
	waiters(t, db, app, 2) // on task 1 too, holding rows 2 and 3
	require.NoError(t, hold.Commit(ctx))
	requireNoDeadlock(t, <-recoveryDone, "recovery")
	requireNoDeadlock(t, <-ingestDone, "ingest")

	require.Equal(t, int64(2), recovered.Taken)
	require.Equal(t, 2, ingested.Returned)
	require.Zero(t, count(t, db, "status = 'replaying'"))
	requireTaskAddsUp(t, st, db, t1.ID, "task 1")
	requireTaskAddsUp(t, st, db, t2.ID, "task 2")
	requireCountersConsistent(t, db)
}

// Rekey seals a waiting edit (a replay task's row) and a failure group's
// text while a settlement of the same task moves rows of that group: the
// settlement writes the task's counters and then the group's. Rekey took
// the groups first and the tasks after; each then waited for the other.
func TestRekeyRestLocksTasksBeforeGroups(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := dlqtest.Schema(t)
	db := dlqtest.DB(t, dsn)
	plain := openStore(t, dsn, nil, nil)
	ids := seedPending(t, plain, db, "orders", 1)
	// An edit-then-replay, stored before encryption was turned on.
	task, err := plain.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{IDs: ids, Status: "all"}, MaxItems: 10,
		Request: json.RawMessage(`{}`), Actor: replayActor,
		Edit: &store.NewEdit{MessageID: ids[0], Edit: json.RawMessage(`{"body":"fixed","replay_id":"r"}`), CopyReplayID: "r"}})
	require.NoError(t, err)
	res, err := plain.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "c", Lease: time.Minute, IDs: ids, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)

	st, app := watchedStore(t, dsn, newRing(t, newKey(t, "k1")))
	lease := rekeyLease(t, st)
	hold := holdTask(ctx, t, db, task.ID)
	settled := inBackground(func() error {
		_, err := st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{{ID: ids[0], Token: "c", Result: store.OutcomePublished}}, false, "c")
		return err
	})
	waiters(t, db, app, 1) // on the task, holding the message's row
	rekeyed := inBackground(func() error { _, _, err := st.RekeyRest(ctx, lease); return err })
	waiters(t, db, app, 2) // on the task too
	require.NoError(t, hold.Commit(ctx))
	requireNoDeadlock(t, <-settled, "settlement")
	requireNoDeadlock(t, <-rekeyed, "rekey")

	var plainGroups, plainEdits int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM failure_groups WHERE enc_key_id IS DISTINCT FROM 'k1'`).Scan(&plainGroups))
	require.Zero(t, plainGroups, "the group's text is sealed")
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM replay_tasks WHERE edit->>'key_id' IS DISTINCT FROM 'k1'`).Scan(&plainEdits))
	require.Zero(t, plainEdits, "the edit is sealed")
	require.Equal(t, 1, count(t, db, "status = 'replayed'"))
	requireTaskAddsUp(t, st, db, task.ID, "after the settlement")
	requireCountersConsistent(t, db)
}

// holdRow locks a message's row in a transaction of the test's, as a
// settlement or an acknowledgement would, until the test commits it.
func holdRow(ctx context.Context, t *testing.T, db *pgxpool.Pool, id int64) pgx.Tx {
	t.Helper()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `SELECT 1 FROM dead_messages WHERE id = $1 FOR NO KEY UPDATE`, id)
	require.NoError(t, err)
	return tx
}

// Replayed copies of two messages die again and come back in one batch,
// the higher id first, while a settlement of the same two rows runs: the
// settlement locks them in id order. Ingest locked each row as its copy
// came, so it held the second and waited for the first, the settlement
// the other way round. In the clear and sealed (whose return compares and
// rewrites the row differently).
func TestIngestReturnsLockRowsInSettlementOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		sealed bool
	}{{"plain", false}, {"sealed", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var ring *crypt.Ring
			if c.sealed {
				ring = newRing(t, newKey(t, "k1"))
			}
			ingestReturnsBesideSettlement(t, ring)
		})
	}
}

// ingestReturnsBesideSettlement is TestIngestReturnsLockRowsInSettlementOrder
// on a store sealing with ring (nil: plain).
func ingestReturnsBesideSettlement(t *testing.T, ring *crypt.Ring) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := dlqtest.Schema(t)
	db := dlqtest.DB(t, dsn)
	st := openStore(t, dsn, ring, nil)
	ids := seedPending(t, st, db, "orders", 2)
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	claim, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "c", Lease: time.Minute, IDs: ids, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, claim.Messages, 2)

	rec, app := watchedStore(t, dsn, ring)
	hold := holdRow(ctx, t, db, ids[0])
	var settled store.SettleResult
	settleDone := inBackground(func() (err error) {
		outs := []store.ReplayOutcome{
			{ID: ids[0], Token: "c", Result: store.OutcomePublished},
			{ID: ids[1], Token: "c", Result: store.OutcomePublished},
		}
		settled, err = rec.SettleReplayOutcomes(ctx, task.ID, outs, false, "c")
		return err
	})
	waiters(t, db, app, 1) // on the first row, holding nothing
	// The copies come back, the higher id first.
	var back []store.NewMessage
	for _, i := range []int{1, 0} {
		m := msg("orders", fmt.Sprintf("body %d", i), int64(900+i))
		m.DLQID, m.ReplayID, m.ReplayCount, m.Reason = ids[i], fmt.Sprintf("rid-%d", i), 1, "expired"
		back = append(back, m)
	}
	var ingested store.IngestResult
	ingestDone := inBackground(func() (err error) {
		ingested, err = rec.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: back})
		return err
	})
	waiters(t, db, app, 2) // on the first row too, behind the settlement
	require.NoError(t, hold.Commit(ctx))
	requireNoDeadlock(t, <-settleDone, "settlement")
	requireNoDeadlock(t, <-ingestDone, "ingest")

	require.Equal(t, int64(2), settled.Published, "the settlement, first in line, settled both")
	require.Equal(t, []store.Outcome{store.OutcomeReturned, store.OutcomeReturned}, ingested.Outcomes)
	require.Equal(t, 2, count(t, db, "status = 'pending' AND reason = 'expired' AND replay_count = 1"), "both rows back, with their new deaths")
	require.Equal(t, 2, count(t, db, "TRUE"), "no new row")
	requireTaskAddsUp(t, st, db, task.ID, "after the settlement and the returns")
	requireCountersConsistent(t, db)
}

// One replayed copy comes back in a batch that also holds a redelivery of
// a message whose acknowledgement is unconfirmed, while an acknowledge by
// id of both rows runs. The redelivery's match keeps the row it moves
// locked (the higher id), and the copy's row (the lower) was then locked
// in arrival order: ingest held the higher and waited for the lower, the
// acknowledge the other way round. A single copy was thought to have no
// order to get wrong.
func TestIngestReturnAfterARedeliveryLocksInOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := dlqtest.Schema(t)
	db := dlqtest.DB(t, dsn)
	st := openStore(t, dsn, nil, nil)
	low := seedPending(t, st, db, "orders", 1)[0]
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	claim, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "c", Lease: time.Minute, IDs: []int64{low}, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, claim.Messages, 1)
	// The higher row, stored by a batch whose acknowledgement never
	// reached the broker (no ConfirmBatches): its redelivery matches it.
	first := msg("orders", "body high", 777)
	_, err = st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{first}})
	require.NoError(t, err)
	high := messageIDs(t, db, "fingerprint = 777")[0]
	require.Greater(t, high, low)

	rec, app := watchedStore(t, dsn, nil)
	hold := holdRow(ctx, t, db, low)
	ackDone := inBackground(func() error {
		_, err := rec.Acknowledge(ctx, store.Filter{IDs: []int64{low, high}, Status: "all"},
			store.Actor{Name: "jane", Via: "api"}, store.ActionOptions{Confirm: true})
		return err
	})
	waiters(t, db, app, 1) // on the lower row, holding nothing
	again := first
	again.Redelivered = true
	back := msg("orders", "body 0", 900)
	back.DLQID, back.ReplayID, back.ReplayCount, back.Reason = low, "rid-0", 1, "expired"
	ingestDone := inBackground(func() error {
		_, err := rec.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test",
			Messages: []store.NewMessage{again, back}})
		return err
	})
	waiters(t, db, app, 2) // on the lower row too, behind the acknowledge
	require.NoError(t, hold.Commit(ctx))
	// The acknowledge finds the lower row being replayed, once it has
	// both rows: refused as a conflict, not aborted.
	if err := <-ackDone; !errors.Is(err, store.ErrConflict) {
		requireNoDeadlock(t, err, "acknowledge")
	}
	requireNoDeadlock(t, <-ingestDone, "ingest")
	require.Equal(t, 2, count(t, db, "TRUE"), "nothing stored twice")
	requireCountersConsistent(t, db)
}
