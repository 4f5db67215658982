package cleanup

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// The cleanup job writes down the expiry of approval requests past their
// own expires_at (with an audit row, the snapshot freed) and deletes console
// sessions past theirs; requests and sessions still running are left alone.
func TestCleanupExpiresApprovalsAndSessions(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	st, dsn := dlqtest.Store(t)
	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	for i := range 3 {
		b.Messages = append(b.Messages, store.NewMessage{SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected",
			Properties: []byte(`{}`), Headers: []byte(`{}`), Body: []byte("x"), FirstFailedAt: time.Now(), FailedAt: time.Now(),
			Fingerprint: int64(i)})
	}
	_, err := st.IngestBatch(ctx, b)
	require.NoError(t, err)
	request := func() store.Approval {
		a, err := st.CreateApproval(ctx, store.NewApproval{Action: store.ActionDelete, Request: []byte(`{}`),
			Selection: store.Filter{SourceQueue: "orders"}, TTL: time.Hour, Actor: store.Actor{Name: "jane", Via: "api"}})
		require.NoError(t, err)
		return a
	}
	expired, running := request(), request()
	require.NoError(t, st.CreateConsoleSession(ctx, []byte("old-session-hash"), "jane", time.Now().Add(-time.Minute)))
	require.NoError(t, st.CreateConsoleSession(ctx, []byte("new-session-hash"), "jane", time.Now().Add(time.Hour)))
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1`, expired.ID)
	require.NoError(t, err)

	c, err := New(Config{Store: st, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	n, err := c.DeleteExpired(ctx, dlqtest.Lease(t, st, "own-expiry-test"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "one request expired, one session deleted")

	count := func(sql string, args ...any) (n int) {
		require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}
	require.Equal(t, 1, count(`SELECT count(*) FROM approvals WHERE status = 'expired' AND id = $1`, expired.ID))
	require.Equal(t, 1, count(`SELECT count(*) FROM approvals WHERE status = 'pending' AND id = $1`, running.ID))
	require.Zero(t, count(`SELECT count(*) FROM approval_items WHERE approval_id = $1`, expired.ID), "the snapshot is freed")
	require.Equal(t, 3, count(`SELECT count(*) FROM approval_items WHERE approval_id = $1`, running.ID))
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE action = 'approval_expire'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM console_sessions`))
	_, err = st.GetConsoleSession(ctx, []byte("new-session-hash"))
	require.NoError(t, err)
}
