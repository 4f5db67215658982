package replay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// A runner publishes from a claim only while it holds it. Past the claim's
// deadline (a late heartbeat) it asks the database again: a claim whose
// lease has not run out is renewed and publishing goes on; a claim taken
// back (its lease ran out, recovery gave its rows to others) is lost, and
// a late heartbeat renewal does not revive it.
func TestRunnerFencesLostClaims(t *testing.T) {
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	now := time.Now().UTC()
	var msgs []store.NewMessage
	for i := range 4 {
		msgs = append(msgs, store.NewMessage{MessageID: "m", SourceQueue: "orders", SourceRoutingKey: "orders",
			DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1, Properties: []byte(`{}`), Headers: []byte(`{}`),
			Body: []byte{byte(i)}, FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1)})
	}
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: msgs})
	require.NoError(t, err)
	s, err := New(Config{Store: st, Lease: 5 * time.Second})
	require.NoError(t, err)
	task, err := s.Start(ctx, Request{Filter: &store.Filter{SourceQueue: "orders"}}, store.Actor{Name: "test", Via: "test"})
	require.NoError(t, err)
	held, ok, err := st.AcquireReplayTask(ctx, "runner-1", s.cfg.Lease, nil)
	require.NoError(t, err)
	require.True(t, ok)
	r := s.newRun(held)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.ctx, r.stop = ctx, cancel

	items, _, err := st.ReplayItemsAfter(ctx, task.ID, 0, 10, 0, 0)
	require.NoError(t, err)
	require.Len(t, items, 4)
	batch := func(token string, ids []int64) *claimBatch {
		res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: token, Lease: s.cfg.Lease, IDs: ids, MaxReplays: 5, MarkFirst: markFirst})
		require.NoError(t, err)
		require.Len(t, res.Messages, len(ids))
		b := &claimBatch{token: token, msgs: res.Messages, open: len(ids), deadline: time.Now().Add(r.fenceLease())}
		r.batches[token] = b
		return b
	}
	a, lost := batch("a", items[:2]), batch("b", items[2:])
	past := time.Now().Add(-time.Second)

	require.True(t, r.stillHeld(ctx, a), "within its deadline")
	a.deadline = past
	require.True(t, r.stillHeld(ctx, a), "late heartbeat, lease not run out: renewed")
	require.True(t, a.deadline.After(time.Now()), "with a new deadline")

	// b's holder stalled: its lease ran out and recovery took its rows back.
	_, err = db.Exec(ctx, `UPDATE replay_claims SET expires_at = now() - interval '1 second' WHERE token = 'b'`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET claim_expires_at = now() - interval '1 second' WHERE claim_owner = 'b'`)
	require.NoError(t, err)
	got, err := st.RecoverExpiredReplayClaims(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Taken)

	// The stalled heartbeat comes back: it renews a, not b.
	a.deadline, lost.deadline = past, past
	r.renew(ctx)
	require.True(t, a.deadline.After(time.Now()), "a is still held")
	require.Equal(t, past, lost.deadline, "b stays past its deadline")
	require.False(t, r.stillHeld(ctx, lost), "and is lost: nothing of it is published")

	// The runner hands the lost batch back, as publishBatch does, and the
	// release is settled: recovery already took those rows out of the
	// task's claimed count, and they are not taken out twice.
	r.release(lost, lost.msgs)
	r.mu.Lock()
	outs := r.outcomes
	r.outcomes = nil
	r.mu.Unlock()
	r.settle(ctx, outs)
	got2, err := st.GetReplayTask(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), got2.Claimed, "a's two rows, still claimed")
	require.Zero(t, got2.Published+got2.Failed+got2.Unknown+got2.Skipped)
	require.Equal(t, got2.Requested, got2.Remaining())
}

// A renewal that takes longer than the fence (it waited for the claim's
// row behind a slow commit) extends the claim from when it began, and by
// the time its answer comes that lease has run out: the holder publishes
// nothing more from the claim, renewed or not, since recovery may take it
// back. stillHeld let the next publish through.
func TestRunnerFencesALateLeaseRenewal(t *testing.T) {
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC()
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{{
		MessageID: "m", SourceQueue: "orders", SourceRoutingKey: "orders", DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
		Properties: []byte(`{}`), Headers: []byte(`{}`), Body: []byte("x"), FirstFailedAt: now, FailedAt: now, Fingerprint: 1}}})
	require.NoError(t, err)
	s, err := New(Config{Store: st, Lease: 300 * time.Millisecond})
	require.NoError(t, err)
	task, err := s.Start(ctx, Request{Filter: &store.Filter{SourceQueue: "orders"}}, store.Actor{Name: "test", Via: "test"})
	require.NoError(t, err)
	held, ok, err := st.AcquireReplayTask(ctx, "runner-1", time.Minute, nil)
	require.NoError(t, err)
	require.True(t, ok)
	r := s.newRun(held)
	items, _, err := st.ReplayItemsAfter(ctx, task.ID, 0, 10, 0, 0)
	require.NoError(t, err)
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "a", Lease: time.Minute, IDs: items, MaxReplays: 5, MarkFirst: markFirst})
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)
	b := &claimBatch{token: "a", msgs: res.Messages, open: 1, deadline: time.Now().Add(-time.Second)}
	r.batches["a"] = b

	hold, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(context.Background()) }()
	var holder int
	require.NoError(t, hold.QueryRow(ctx, `SELECT pg_backend_pid() FROM replay_claims WHERE token = 'a' FOR UPDATE`).Scan(&holder))
	asked := time.Now()
	answer := make(chan bool, 1)
	go func() { answer <- r.stillHeld(ctx, b) }()
	dlqtest.Eventually(t, 5*time.Second, func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&n))
		return n > 0
	}, "the renewal does not wait for the claim's row")
	dlqtest.Eventually(t, 5*time.Second, func() bool { return time.Since(asked) > s.cfg.Lease }, "the lease has not run out")
	require.NoError(t, hold.Commit(ctx))
	require.False(t, <-answer, "renewed, but past the renewal's own deadline")
}
