package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// The next moment a runner should look again counts only future moments
// at which a task may become takeable: a delayed start, or the end of a
// live runner's lease. Past starts (tasks running, or held elsewhere),
// finished tasks and the tasks the caller runs itself do not count.
func TestNextReplayTaskDue(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seedPending(t, st, db, "orders", 4)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	next := func(exclude ...int64) time.Time {
		t.Helper()
		at, err := st.NextReplayTaskDue(ctx, exclude)
		require.NoError(t, err)
		return at
	}
	require.True(t, next().IsZero(), "no task")

	// Due in the past, held by nobody: it is taken at once, not waited for.
	due := newTask(t, st, store.Filter{IDs: ids[:1], Status: "all"})
	require.True(t, next().IsZero(), "a task already due is no future moment")

	// Held by a live runner: takeable when its lease runs out.
	held := newTask(t, st, store.Filter{IDs: ids[1:2], Status: "all"})
	exec(`UPDATE replay_tasks SET status = 'running', runner_owner = 'elsewhere', runner_expires_at = now() + interval '20 seconds' WHERE id = $1`, held.ID)
	lease := next()
	require.WithinDuration(t, time.Now().Add(20*time.Second), lease, 5*time.Second)
	require.True(t, next(held.ID).IsZero(), "a task the caller runs itself does not count")

	// A delayed task sooner than that lease is the next moment.
	delayed := newTask(t, st, store.Filter{IDs: ids[2:3], Status: "all"})
	exec(`UPDATE replay_tasks SET start_at = now() + interval '5 seconds' WHERE id = $1`, delayed.ID)
	require.WithinDuration(t, time.Now().Add(5*time.Second), next(), 3*time.Second)

	// An expired lease is past: the task is takeable now.
	exec(`UPDATE replay_tasks SET runner_expires_at = now() - interval '1 second' WHERE id = $1`, held.ID)
	exec(`UPDATE replay_tasks SET status = 'cancelled', finished_at = now() WHERE id = $1`, delayed.ID)
	require.True(t, next().IsZero(), "finished tasks and past moments do not count")

	// A delayed task held by a runner (it started early on another clock)
	// counts from the later of its start and the lease.
	exec(`UPDATE replay_tasks SET start_at = now() + interval '2 seconds', runner_owner = 'x', runner_expires_at = now() + interval '30 seconds' WHERE id = $1`, due.ID)
	require.WithinDuration(t, time.Now().Add(30*time.Second), next(held.ID), 5*time.Second)
}
