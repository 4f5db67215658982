package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// A renewal extends only the claims still held: one whose lease ran out is
// not renewed — taken back already or not — so its holder learns it must
// not publish from it any more.
func TestRenewReplayLeaseSkipsLostClaims(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seedPending(t, st, db, "orders", 6)
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	acquire(t, db, task.ID, "runner")
	claim := func(token string, ids []int64) {
		t.Helper()
		res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: token, Lease: time.Minute, IDs: ids, MaxReplays: 5, MarkFirst: 32})
		require.NoError(t, err)
		require.Len(t, res.Messages, len(ids))
	}
	claim("live", ids[:2])
	claim("expired", ids[2:4])
	claim("taken-back", ids[4:])
	expire := func(token string) {
		t.Helper()
		_, err := db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 second' WHERE token = $1`, token)
		require.NoError(t, err)
		_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 second' WHERE claim_owner = $1`, token)
		require.NoError(t, err)
	}
	expire("taken-back")
	got, err := st.RecoverExpiredReplayClaims(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Taken)
	expire("expired")

	status, renewed, err := st.RenewReplayLease(ctx, task.ID, "runner", []string{"live", "expired", "taken-back"}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.TaskRunning, status)
	require.Equal(t, []string{"live"}, renewed)
	var expired int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM replay_claims WHERE token = 'expired' AND expires_at < now()`).Scan(&expired))
	require.Equal(t, 1, expired, "an expired claim stays expired, for recovery to take")

	_, _, err = st.RenewReplayLease(ctx, task.ID, "someone else", []string{"live"}, time.Minute)
	require.True(t, errors.Is(err, store.ErrReplayLeaseLost), "%v", err)
}

// A renewal that began while its claim was still held waits for the
// claim's row (behind a mark, a settlement, a slow commit) while the
// lease runs out and recovery begins: only one of them may win. Either the
// renewal extends the claim and recovery leaves its rows, or recovery
// takes them and the renewal reports the claim lost. Recovery read the
// lease without the row's lock, so both won: the holder, told its claim
// was renewed, published on, while the rows above its mark went back to
// the task as never published, to be sent again.
func TestClaimRenewalAndRecoveryTakeTurns(t *testing.T) {
	t.Parallel()
	// The renewal is first in line for the claim's row; recovery passes
	// the claim over, and leaves it renewed (for a minute).
	t.Run("renewal first", func(t *testing.T) {
		t.Parallel()
		renewed, taken := renewalBeforeRecovery(t, time.Minute)
		require.Equal(t, []string{"b"}, renewed, "the renewal wins")
		require.Zero(t, taken, "recovery leaves the claim")
	})
	// The same, but the lease the renewal gives (a second from when it
	// began) has run out too when it gets the row: it reports the claim
	// lost, and recovery's next pass takes it.
	t.Run("renewal first, its own lease run out", func(t *testing.T) {
		t.Parallel()
		renewed, taken := renewalBeforeRecovery(t, time.Second)
		require.Empty(t, renewed, "the renewal reports the claim lost")
		require.Equal(t, int64(3), taken, "recovery takes it")
	})
	// The renewal waits for another claim it renews, which comes first;
	// recovery takes the lapsed claim meanwhile (all its rows but one: the
	// claim's row stays), and the renewal, reaching it after, finds it
	// taken.
	t.Run("recovery first", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := lapsingClaim(t)
		rec, app := watchedStore(t, c.dsn, nil)
		hold := holdClaim(ctx, t, c.db, c.held)
		var renewed []string
		renewal := inBackground(func() (err error) {
			_, renewed, err = rec.RenewReplayLease(ctx, c.task, "runner", []string{c.held, c.token}, time.Minute)
			return err
		})
		waiters(t, c.db, app, 1) // on the held claim, the lapsing one not reached yet
		waitLapsed(t, c.db, c.token)
		got, err := rec.RecoverExpiredReplayClaims(ctx, len(c.ids)-1)
		require.NoError(t, err)
		require.Equal(t, int64(len(c.ids)-1), got.Taken)
		require.NoError(t, hold.Commit(ctx))
		requireNoDeadlock(t, <-renewal, "renewal")
		require.Equal(t, []string{c.held}, renewed, "the claim taken back is not renewed")
		got, err = rec.RecoverExpiredReplayClaims(ctx, 100)
		require.NoError(t, err)
		require.Equal(t, int64(1), got.Taken, "nor is its last row")
		requireTaskAddsUp(t, c.st, c.db, c.task, "after both")
		requireCountersConsistent(t, c.db)
	})
}

// renewalBeforeRecovery lines a renewal of a lapsing claim (giving lease)
// up behind the claim's row, begun before the claim's lease ran out, runs
// a recovery once it has run out, lets the renewal go, and runs recovery
// again. Whatever the outcome, they may not both win. It returns the
// tokens renewed and the rows recovery took.
func renewalBeforeRecovery(t *testing.T, lease time.Duration) ([]string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := lapsingClaim(t)
	rec, app := watchedStore(t, c.dsn, nil)
	hold := holdClaim(ctx, t, c.db, c.token)
	var renewed []string
	renewal := inBackground(func() (err error) {
		_, renewed, err = rec.RenewReplayLease(ctx, c.task, "runner", []string{c.token}, lease)
		return err
	})
	waiters(t, c.db, app, 1) // on the claim, its lease not run out
	waitLapsed(t, c.db, c.token)
	var got store.RecoveredClaims
	recovery := inBackground(func() (err error) { got, err = rec.RecoverExpiredReplayClaims(ctx, 100); return err })
	// Recovery passes the claim over; were it to wait for it, it would
	// wait behind the renewal.
	dlqtest.Eventually(t, 5*time.Second, func() bool { return len(recovery) > 0 || lockWaits(t, c.db, app) >= 2 },
		"recovery neither waits for the claim nor is done")
	require.NoError(t, hold.Commit(ctx))
	requireNoDeadlock(t, <-renewal, "renewal")
	requireNoDeadlock(t, <-recovery, "recovery")
	again, err := rec.RecoverExpiredReplayClaims(ctx, 100)
	require.NoError(t, err)
	taken := got.Taken + again.Taken

	won := slices.Contains(renewed, c.token)
	require.False(t, won && taken > 0, "the claim was renewed and taken back: renewed %v, recovery took %d", renewed, taken)
	if won {
		require.Equal(t, len(c.ids), count(t, c.db, "status = 'replaying' AND claim_owner = $1", c.token), "the holder keeps its rows")
	}
	requireTaskAddsUp(t, c.st, c.db, c.task, "after both")
	requireCountersConsistent(t, c.db)
	return renewed, taken
}

// lapsing is a task's claim whose lease runs out in two seconds (its
// rows' own lease has run out already), beside another claim of the task
// held for a minute.
type lapsing struct {
	st          *store.Store
	db          *pgxpool.Pool
	dsn         string
	task        int64
	held, token string
	ids         []int64 // the lapsing claim's rows
}

// lapsingClaim makes a lapsing claim in a store of the test's own.
func lapsingClaim(t *testing.T) lapsing {
	t.Helper()
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ids := seedPending(t, st, db, "orders", 4)
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	acquire(t, db, task.ID, "runner")
	// "a" before "b", in the table and by token: a renewal of both
	// reaches a first.
	c := lapsing{st: st, db: db, dsn: dsn, task: task.ID, held: "a", token: "b", ids: ids[1:]}
	for _, cl := range []struct {
		token string
		ids   []int64
	}{{c.held, ids[:1]}, {c.token, c.ids}} {
		res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: cl.token, Lease: time.Minute, IDs: cl.ids,
			MaxReplays: 5, MarkFirst: 1})
		require.NoError(t, err)
		require.Len(t, res.Messages, len(cl.ids))
	}
	_, err := db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 second' WHERE claim_owner = $1`, c.token)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() + interval '2 seconds' WHERE token = $1`, c.token)
	require.NoError(t, err)
	return c
}

// holdClaim locks a claim's replay_claims row in a transaction of the
// test's, as a mark or a settlement ending the claim would, until the test
// commits it.
func holdClaim(ctx context.Context, t *testing.T, db *pgxpool.Pool, token string) pgx.Tx {
	t.Helper()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `SELECT 1 FROM replay_claims WHERE token = $1 FOR UPDATE`, token)
	require.NoError(t, err)
	return tx
}

// waitLapsed waits until the claim's lease has run out by the database's
// clock.
func waitLapsed(t *testing.T, db *pgxpool.Pool, token string) {
	t.Helper()
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		var lapsed bool
		require.NoError(t, db.QueryRow(context.Background(),
			`SELECT expires_at < clock_timestamp() FROM replay_claims WHERE token = $1`, token).Scan(&lapsed))
		return lapsed
	}, "claim %s's lease has not run out", token)
}

// lockWaits counts app's connections waiting for a lock.
func lockWaits(t *testing.T, db *pgxpool.Pool, app string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n))
	return n
}
