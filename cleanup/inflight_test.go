package cleanup

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// inflightRow writes a one-message batch as consumer, dated age ago in
// ingest_inflight, and returns its id.
func inflightRow(t *testing.T, st *store.Store, consumer string, age time.Duration) int64 {
	t.Helper()
	ctx := ctxT(t)
	now := time.Now()
	id := store.NewBatchID()
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: id, Consumer: consumer, Messages: []store.NewMessage{{
		SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
		Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`), Body: []byte("b"),
		FirstFailedAt: now, FailedAt: now, Fingerprint: id,
	}}})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE ingest_inflight SET committed_at = now() - $2::interval WHERE batch_id = $1`, id, age.String())
	require.NoError(t, err)
	return id
}

func inflightIDs(t *testing.T, st *store.Store) []int64 {
	t.Helper()
	rows, err := st.Pool().Query(ctxT(t), `SELECT batch_id FROM ingest_inflight ORDER BY batch_id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestInflightExpiryWithoutIngest: a process that does not ingest deletes
// no ingest_inflight row, and a negative TTL keeps them forever.
func TestInflightExpiryWithoutIngest(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := ctxT(t)
	old := inflightRow(t, st, "dlq-killed-1-dlq-0", 48*time.Hour)
	l := testLease(t, st, "inflight-expiry-test")

	n, err := inflightExpiry(st, nil, time.Hour, time.Now).Delete(ctx, l, time.Now().Add(-time.Hour), 10)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, []int64{old}, inflightIDs(t, st))

	var c Config
	c.setDefaults()
	require.Equal(t, IngestInflightTTLDefault, c.IngestInflightTTL)
	c = Config{IngestInflightTTL: -1}
	c.setDefaults()
	require.Negative(t, c.IngestInflightTTL, "a negative TTL keeps ingest_inflight rows forever")
}
