package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// A replay's dry run samples what the replay would send: within its
// limit, the lowest ids first (it once listed the whole selection's first
// ids, messages past the limit among them).
func TestPreviewReplaySampleKeepsTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := dlqtest.Store(t)
	now := time.Now().UTC()
	var msgs []store.NewMessage
	for i := range 5 {
		msgs = append(msgs, store.NewMessage{MessageID: fmt.Sprintf("p-%d", i), SourceQueue: "orders", SourceRoutingKey: "orders",
			DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1, Properties: json.RawMessage(`{}`),
			Headers: json.RawMessage(`{}`), Body: []byte(`{}`), FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1)})
	}
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: msgs})
	require.NoError(t, err)
	all, err := st.PreviewReplay(ctx, store.Filter{SourceQueue: "orders"}, 0, 100, 5, 10)
	require.NoError(t, err)
	require.EqualValues(t, 5, all.Matched)
	require.Len(t, all.Sample, 5)

	two, err := st.PreviewReplay(ctx, store.Filter{SourceQueue: "orders"}, 2, 100, 5, 10)
	require.NoError(t, err)
	require.EqualValues(t, 2, two.Matched)
	require.Equal(t, all.Sample[:2], two.Sample)

	few, err := st.PreviewReplay(ctx, store.Filter{SourceQueue: "orders"}, 4, 100, 5, 3)
	require.NoError(t, err)
	require.EqualValues(t, 4, few.Matched)
	require.Equal(t, all.Sample[:3], few.Sample, "the sample's own size, when smaller")
}
