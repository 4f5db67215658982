package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// An edit's copy replay id may come from a front door (the console's
// preview): the store finds whose copy has an id, refuses a second edit
// that gives another message's copy the same one, and finds a stored
// message by a header value among its search keys (the copy, once it died
// again), within a scope.
func TestEditCopyReplayIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	const rid = "6f1c0a52-3d9e-4c1b-9b7a-2f0e8d4c5a61"
	copyMsg := msg("orders", "copy", 3)
	copyMsg.Headers = json.RawMessage(`{"x-dlq-replay-id":"` + rid + `","x-dlq-edited-from":{"type":"int64","value":1}}`)
	ingest(t, st, msg("orders", "a", 1), msg("orders", "b", 2), copyMsg)
	ids := messageIDs(t, db, "true")
	require.Len(t, ids, 3)
	edit := func(id int64, replayID string) error {
		_, err := st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{IDs: []int64{id}, Status: "all"}, MaxItems: 10,
			Request: json.RawMessage(`{}`), Actor: store.Actor{Name: "t"},
			Edit: &store.NewEdit{MessageID: id, Edit: json.RawMessage(`{"body":"fixed","replay_id":"` + replayID + `"}`), CopyReplayID: replayID}})
		return err
	}
	_, used, err := st.EditCopyOwner(ctx, rid)
	require.NoError(t, err)
	require.False(t, used)
	require.NoError(t, edit(ids[0], rid))
	owner, used, err := st.EditCopyOwner(ctx, rid)
	require.NoError(t, err)
	require.True(t, used)
	require.Equal(t, ids[0], owner)
	require.ErrorIs(t, edit(ids[1], rid), store.ErrConflict, "another message's copy has that id")
	require.Zero(t, count(t, db, "id = $1 AND status = 'replaying'", ids[1]), "nothing recorded for it")

	found, err := st.MessagesWithKey(ctx, rid, nil, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2]}, found, "by the header value, whatever its case")
	found, err = st.MessagesWithKey(ctx, "6F1C0A52-3D9E-4C1B-9B7A-2F0E8D4C5A61", []string{"orders"}, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2]}, found)
	found, err = st.MessagesWithKey(ctx, rid, []string{"payments"}, 10)
	require.NoError(t, err)
	require.Empty(t, found, "outside the scope")
}
