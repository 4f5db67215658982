package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// earlierAcquire is how the replay runners of the earlier version (fdd4749,
// store/replay_claims.go) take a task: the statement they still send to a
// schema this version migrated, during a rolling upgrade.
const earlierAcquire = `
UPDATE replay_tasks SET runner_owner = $1, runner_expires_at = now() + $2 * interval '1 millisecond',
    status = CASE WHEN status = 'scheduled' THEN 'running' ELSE status END,
    started_at = coalesce(started_at, now()), updated_at = now()
WHERE id = (
    SELECT id FROM replay_tasks
    WHERE status IN ('scheduled', 'running', 'canary_wait') AND start_at <= now()
      AND (runner_expires_at IS NULL OR runner_expires_at < now())
      AND NOT (id = ANY($3::bigint[]))
    ORDER BY start_at, id LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING id`

// An earlier version's runner, which knows nothing of edits, never takes
// an edit-then-replay task (it would publish the message as stored instead
// of the corrected copy): the database drops its acquisition, and a
// runner of this version takes the task. A plain task it takes as before.
func TestEarlierRunnerLeavesEditTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingest(t, st, msg("orders", "a", 1), msg("orders", "b", 2))
	var ids []int64
	rows, err := db.Query(ctx, `SELECT id FROM dead_messages ORDER BY id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 2)
	newTask := func(id int64, edit *store.NewEdit) store.ReplayTask {
		t.Helper()
		task, err := st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{IDs: []int64{id}, Status: "all"}, MaxItems: 10,
			Request: json.RawMessage(`{}`), Actor: store.Actor{Name: "t"}, Edit: edit})
		require.NoError(t, err)
		return task
	}
	edit := newTask(ids[0], &store.NewEdit{MessageID: ids[0], Edit: json.RawMessage(`{"body":"fixed","replay_id":"r"}`), CopyReplayID: "r"})
	plain := newTask(ids[1], nil)

	earlier := func() (int64, bool) {
		t.Helper()
		var id int64
		err := db.QueryRow(ctx, earlierAcquire, "earlier-runner", 30_000, []int64{}).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false
		}
		require.NoError(t, err)
		return id, true
	}
	_, ok := earlier()
	require.False(t, ok, "the edit task comes first and is refused to the earlier runner")
	var owner *string
	require.NoError(t, db.QueryRow(ctx, `SELECT runner_owner FROM replay_tasks WHERE id = $1`, edit.ID).Scan(&owner))
	require.Nil(t, owner)

	got, ok, err := st.AcquireReplayTask(ctx, "this-runner", 30*time.Second, nil)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, edit.ID, got.ID, "this version's runner takes the edit task")
	require.NotEmpty(t, got.Edit)

	id, ok := earlier()
	require.True(t, ok)
	require.Equal(t, plain.ID, id, "the earlier runner takes a plain task")

	// Leases that ran out: the edit task is again this version's alone
	// (until one of its runners takes it, the earlier runner finds no task:
	// a poll interval at most while both versions run).
	_, err = db.Exec(ctx, `UPDATE replay_tasks SET runner_expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	_, ok = earlier()
	require.False(t, ok)
	got, ok, err = st.AcquireReplayTask(ctx, "this-runner-2", 30*time.Second, nil)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, edit.ID, got.ID)
	id, ok = earlier()
	require.True(t, ok)
	require.Equal(t, plain.ID, id)
}
