package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// The tests that count how dlq's statements read dead_messages
// (pg_stat_user_tables) share this: a store of one connection, so that
// every statement is prepared where it runs later, on a table autovacuum
// leaves alone, grown behind the store's back.

// oneConnStore opens a migrated store of one connection on a schema of
// its own, with autovacuum off on dead_messages.
func oneConnStore(t *testing.T) (*store.Store, string, *pgxpool.Pool) {
	t.Helper()
	dsn := dlqtest.Schema(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 1, TextSearch: true})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	db := dlqtest.DB(t, dsn)
	_, err = db.Exec(ctx, `ALTER TABLE dead_messages SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	return st, dsn, db
}

// growTable adds copies copies of each row the query template selects
// (SELECT * FROM dead_messages ...), each with a new id, no ingest batch,
// a message id of its own and the keys of set (a jsonb_build_object
// argument list over the template m and the copy's number g, or ""), on a
// connection that then ends, so that its statistics are written.
func growTable(t *testing.T, dsn, template string, copies int, set string) {
	t.Helper()
	ctx := context.Background()
	grow, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	if set != "" {
		set = ", " + set
	}
	_, err = grow.Exec(ctx, `INSERT INTO dead_messages
SELECT r.* FROM (`+template+`) m, generate_series(1, $1::int) g,
    jsonb_populate_record(NULL::dead_messages,
        to_jsonb(m) || jsonb_build_object('id', nextval(pg_get_serial_sequence('dead_messages', 'id')), 'ingest_batch', NULL,
            'message_id', m.message_id || '-' || g`+set+`)) r`, copies)
	require.NoError(t, err)
	require.NoError(t, grow.Close(ctx))
}

// tableStat reads a column of pg_stat_user_tables for table, afresh.
func tableStat(t *testing.T, db *pgxpool.Pool, table, col string) int64 {
	t.Helper()
	ctx := context.Background()
	var n int64
	require.NoError(t, db.QueryRow(ctx, `SELECT pg_stat_clear_snapshot()`).Scan(new(any)))
	require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(`+col+`, 0) FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).Scan(&n))
	return n
}

// afterGrowth is one measurement of what statements planned on a small
// dead_messages read once it has grown: 2,500 copies of each row Template
// selects are added (growTable, each with a fingerprint of its own), and
// once their statistics have arrived (the table holds at least Rows),
// Between runs, then Work on the store. The store is closed after Work, so
// that its statistics are written; Arrived says, from the table's
// statistics, that they have.
type afterGrowth struct {
	Template string
	Rows     int64
	Between  func() // optional
	Work     func()
	Arrived  func(stat func(col string) int64) bool
}

// seqReads runs g and returns the rows sequential scans of dead_messages
// read while Work ran.
func (g afterGrowth) seqReads(t *testing.T, st *store.Store, dsn string, db *pgxpool.Pool) int64 {
	t.Helper()
	growTable(t, dsn, g.Template, 2500, `'fingerprint', m.fingerprint * 10000 + g`)
	stat := func(col string) int64 { return tableStat(t, db, "dead_messages", col) }
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_tup_ins") >= g.Rows },
		"the growth's statistics did not arrive")
	if g.Between != nil {
		g.Between()
	}
	before := stat("seq_tup_read")
	g.Work()
	st.Close() // its statistics are written as its connection ends
	dlqtest.Eventually(t, 30*time.Second, func() bool { return g.Arrived(stat) },
		"the statistics of what ran after the growth did not arrive")
	return stat("seq_tup_read") - before
}
