package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestFilterMaxID: a filter bounded by MaxID lists and acts on the
// messages stored up to that id, never on those stored after it.
func TestFilterMaxID(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	before := seed(t, st, []string{"orders"}, 3, func(string, int) (string, string) { return "E", "boom" })
	bound := before[len(before)-1]

	now := time.Now().UTC()
	later := make([]store.NewMessage, 2)
	for i := range later {
		later[i] = store.NewMessage{SourceQueue: "orders", SourceExchange: "ex", SourceRoutingKey: "orders",
			DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1, FailureType: "E", FailureMessage: "boom",
			Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`), Body: []byte("later"),
			FirstFailedAt: now, FailedAt: now, Fingerprint: int64(1000 + i)}
	}
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: later})
	require.NoError(t, err)

	f := store.Filter{SourceQueue: "orders", MaxID: bound}
	page, err := st.ListMessages(ctx, f, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 3)
	for _, m := range page.Messages {
		require.LessOrEqual(t, m.ID, bound)
	}
	g := store.Filter{Group: store.GroupIDOf("orders", "rejected", "E", "boom"), MaxID: bound, Query: "boom"}
	page, err = st.ListMessages(ctx, g, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 3, "a search by failure text keeps the bound")

	res, err := st.Acknowledge(ctx, f, store.Actor{Name: "t", Via: "api"}, store.ActionOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Changed)
	require.Len(t, messageIDs(t, st, "status = 'pending'"), 2, "the later arrivals are untouched")
	require.Len(t, messageIDs(t, st, "status = 'pending' AND id > $1", bound), 2)

	require.ErrorIs(t, store.Filter{MaxID: -1}.Validate(), store.ErrInvalidFilter)
}
