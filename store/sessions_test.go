package store_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestConsoleSessions: a session is found by its hash until it expires or
// is deleted, and the cleanup removes only expired rows, in batches.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	hash := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

	require.NoError(t, st.CreateConsoleSession(ctx, hash("live"), "ops", time.Now().Add(time.Hour)))
	cs, err := st.GetConsoleSession(ctx, hash("live"))
	require.NoError(t, err)
	require.Equal(t, "ops", cs.TokenName)
	require.WithinDuration(t, time.Now().Add(time.Hour), cs.ExpiresAt, time.Minute)

	_, err = st.GetConsoleSession(ctx, hash("never"))
	require.ErrorIs(t, err, store.ErrNotFound)

	for _, id := range []string{"old1", "old2", "old3"} {
		require.NoError(t, st.CreateConsoleSession(ctx, hash(id), "viewer", time.Now().Add(-time.Minute)))
	}
	_, err = st.GetConsoleSession(ctx, hash("old1"))
	require.ErrorIs(t, err, store.ErrNotFound, "an expired session signs nobody in, before any cleanup")

	n, err := st.DeleteExpiredConsoleSessions(ctx, time.Now(), 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "one batch")
	n, err = st.DeleteExpiredConsoleSessions(ctx, time.Now(), 2)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a short batch: done")
	_, err = st.GetConsoleSession(ctx, hash("live"))
	require.NoError(t, err, "the live session is kept")

	require.NoError(t, st.DeleteConsoleSession(ctx, hash("live")))
	_, err = st.GetConsoleSession(ctx, hash("live"))
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, st.DeleteConsoleSession(ctx, hash("live")), "signing out twice is fine")
}

// TestArrivals: arrivals land in the current hour's slot of their queue,
// and a scope hides other queues.
func TestArrivals(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	a, err := st.Arrivals(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, a.Queues)
	require.Equal(t, a.Since, a.Since.Truncate(time.Hour))
	require.WithinDuration(t, time.Now().Truncate(time.Hour).Add(-23*time.Hour), a.Since, time.Hour)

	seed(t, st, []string{"orders", "billing"}, 3, func(string, int) (string, string) { return "E", "boom" })
	a, err = st.Arrivals(ctx, nil)
	require.NoError(t, err)
	require.Len(t, a.Queues, 2)
	// The last slot is the current hour (the one before, if the hour
	// turned since the seed).
	orders := a.Queues["orders"]
	require.EqualValues(t, 3, orders[store.ArrivalHours-1]+orders[store.ArrivalHours-2])
	require.EqualValues(t, 0, orders[0])

	a, err = st.Arrivals(ctx, []string{"billing"})
	require.NoError(t, err)
	require.Len(t, a.Queues, 1)
	require.Contains(t, a.Queues, "billing")
}
