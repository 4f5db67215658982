package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// An edit's copy replay id is derived (ops) after the message's latest
// edit: the store records the edit only while that is still the latest
// one (AfterTaskID), so that two edits at once, or an edit derived before
// another was recorded, never give two copies one id. It also finds a
// stored message by a header value among its search keys (the copy, once
// it died again), within a scope.
func TestEditCopyReplayIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	const rid = "6f1c0a52-3d9e-8c1b-9b7a-2f0e8d4c5a61"
	copyMsg := msg("orders", "copy", 3)
	copyMsg.Headers = json.RawMessage(`{"x-dlq-replay-id":"` + rid + `","x-dlq-edited-from":{"type":"int64","value":1}}`)
	ingest(t, st, msg("orders", "a", 1), msg("orders", "b", 2), copyMsg)
	ids := messageIDs(t, db, "true")
	require.Len(t, ids, 3)
	edit := func(id, after int64, replayID string) (int64, error) {
		task, err := st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{IDs: []int64{id}, Status: "all"}, MaxItems: 10,
			Request: json.RawMessage(`{}`), Actor: store.Actor{Name: "t"},
			Edit: &store.NewEdit{MessageID: id, Edit: json.RawMessage(`{"body":"fixed","replay_id":"` + replayID + `"}`),
				CopyReplayID: replayID, AfterTaskID: after}})
		return task.ID, err
	}
	_, err := edit(ids[0], 99, "r-0")
	require.ErrorIs(t, err, store.ErrConflict, "derived after an edit the message never had")
	require.Zero(t, count(t, db, "id = $1 AND status = 'replaying'", ids[0]), "nothing recorded for it")
	first, err := edit(ids[0], 0, "r-1")
	require.NoError(t, err)
	// The first edit's task gone (so it sent nothing): a new edit may
	// follow it, but only one derived after it.
	_, err = db.Exec(ctx, `DELETE FROM replay_tasks WHERE id = $1`, first)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE dead_messages SET status = 'pending', replay_task_id = NULL WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = edit(ids[0], 0, "r-1")
	require.ErrorIs(t, err, store.ErrConflict, "derived before the first edit was recorded: it could carry the first copy's id")
	second, err := edit(ids[0], first, "r-2")
	require.NoError(t, err)
	e, ok, err := st.GetMessageEdit(ctx, ids[0])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, second, e.TaskID)
	require.Equal(t, "r-2", e.CopyReplayID)

	found, err := st.MessagesWithKey(ctx, rid, nil, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2]}, found, "by the header value, whatever its case")
	found, err = st.MessagesWithKey(ctx, "6F1C0A52-3D9E-8C1B-9B7A-2F0E8D4C5A61", []string{"orders"}, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2]}, found)
	found, err = st.MessagesWithKey(ctx, rid, []string{"payments"}, 10)
	require.NoError(t, err)
	require.Empty(t, found, "outside the scope")
}
