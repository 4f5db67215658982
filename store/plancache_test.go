package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestRedeliveryMatchAfterTheTableGrew: a connection that matched
// redeliveries while dead_messages was nearly empty (dlq started on a new
// database) matches them through the index once the table has grown, as
// after a broker restart redelivers a few thousand messages into a store of
// millions. PostgreSQL keeps a prepared statement's generic plan per
// connection, costed on the table as it was when the plan was made; on a
// nearly empty table that plan is a sequential scan.
func TestRedeliveryMatchAfterTheTableGrew(t *testing.T) {
	t.Parallel()
	dsn := dlqtest.Schema(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	db := dlqtest.DB(t, dsn)
	_, err = db.Exec(ctx, `ALTER TABLE dead_messages SET (autovacuum_enabled = false)`)
	require.NoError(t, err)

	// A redelivery of the message of an in-flight batch is matched to its
	// row: nothing new is stored.
	redeliver := func(fp int64) {
		t.Helper()
		batch, _ := ingest(t, st, msg("orders", "x", fp))
		again := msg("orders", "x", fp)
		again.Redelivered = true
		_, res := ingest(t, st, again)
		require.Equal(t, 1, res.Duplicates, "redelivery of batch %d", batch)
	}
	for i := range 8 {
		redeliver(int64(1000 + i))
	}

	grow, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	_, err = grow.Exec(ctx, `INSERT INTO dead_messages
SELECT r.* FROM (SELECT * FROM dead_messages ORDER BY id LIMIT 8) m, generate_series(1, 2500) g,
    jsonb_populate_record(NULL::dead_messages,
        to_jsonb(m) || jsonb_build_object('id', nextval(pg_get_serial_sequence('dead_messages', 'id')), 'ingest_batch', NULL,
            'fingerprint', m.fingerprint * 10000 + g, 'message_id', m.message_id || '-' || g)) r`)
	require.NoError(t, err)
	require.NoError(t, grow.Close(ctx))
	stat := func(col string) int64 {
		var n int64
		require.NoError(t, db.QueryRow(ctx, `SELECT pg_stat_clear_snapshot()`).Scan(new(any)))
		require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(`+col+`, 0) FROM pg_stat_user_tables WHERE relid = 'dead_messages'::regclass`).Scan(&n))
		return n
	}
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_tup_ins") >= 20008 },
		"the growth's statistics did not arrive")
	before := stat("seq_tup_read")

	const more = 10
	for i := range more {
		redeliver(int64(2000 + i))
	}
	st.Close() // its statistics are written as its connection ends
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_tup_ins") >= 20008+more },
		"the redeliveries' statistics did not arrive")
	read := stat("seq_tup_read") - before
	t.Logf("%d redeliveries read %d rows of dead_messages by sequential scans", more, read)
	require.Less(t, read, int64(20000), fmt.Sprintf("%d redeliveries scanned dead_messages", more))
}
