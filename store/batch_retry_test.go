package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// A batch written again under the id of an attempt that committed (its
// COMMIT's answer lost) is refused without a row written, and the refusal
// is no data error: the writer must ask CommittedRows, not split the batch
// under new ids and store its messages twice.
func TestIngestBatchAgainIsNoDataError(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "c", Messages: []store.NewMessage{msg("orders", "a", 1), msg("orders", "b", 2)}}
	_, err := st.IngestBatch(ctx, b)
	require.NoError(t, err)
	_, err = st.IngestBatch(ctx, b)
	require.Error(t, err)
	require.False(t, store.IsDataError(err), "%v", err)
	rows, ok, err := st.CommittedRows(ctx, b.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 2, rows)
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM dead_messages`).Scan(&n))
	require.Equal(t, 2, n)
}
