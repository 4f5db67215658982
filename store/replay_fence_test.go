package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
