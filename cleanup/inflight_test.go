package cleanup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestInflightExpiryWithoutIngest: a process that does not ingest deletes
// no ingest_inflight row, and a negative TTL keeps them forever.
func TestInflightExpiryWithoutIngest(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	old := dlqtest.InflightRow(t, st, db, "dlq-killed-1-dlq-0", 48*time.Hour)
	l := dlqtest.Lease(t, st, "inflight-expiry-test")

	n, err := inflightExpiry(st, nil, time.Hour, time.Now).Delete(ctx, l, time.Now().Add(-time.Hour), 10)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, []int64{old}, dlqtest.InflightIDs(t, db))

	var c Config
	c.setDefaults()
	require.Equal(t, IngestInflightTTLDefault, c.IngestInflightTTL)
	c = Config{IngestInflightTTL: -1}
	c.setDefaults()
	require.Negative(t, c.IngestInflightTTL, "a negative TTL keeps ingest_inflight rows forever")
}
