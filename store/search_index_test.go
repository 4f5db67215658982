package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestSearchQueriesUseTheirIndexes guards the plans the 10M-row benchmark
// depends on (docs/BENCHMARKS.md, API): a key search must be able to read
// the GIN index over the keys' hashes (migration 00050), and a body search
// with a time bound the (source_queue, status, failed_at) index (00050).
// Since 00061 those indexes leave replaying rows out, and the queries say
// so in their text, as the store's own do.
// With sequential scans priced out, a query that cannot match an index
// still scans, so the plan shows it.
func TestSearchQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	m := msg("orders", `{"sku":"SKU-42"}`, 1)
	m.MessageID = "Msg-ABC-123"
	// Enough other rows that reading a whole index (a partial one's
	// predicate is implied, so it can stand in for the table) costs more
	// than the probe.
	msgs := []store.NewMessage{m}
	for i := range 2000 {
		o := msg("billing", "{}", int64(i+2))
		o.MessageID = fmt.Sprintf("other-%d", i)
		msgs = append(msgs, o)
	}
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: msgs})
	require.NoError(t, err)
	_, err = db.Exec(ctx, `ANALYZE dead_messages`)
	require.NoError(t, err)

	explain := func(q string, args ...any) string {
		t.Helper()
		tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // read-only
		_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
		require.NoError(t, err)
		rows, err := tx.Query(ctx, `EXPLAIN `+q, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	plan := explain(`SELECT m.id FROM dead_messages m WHERE m.status <> 'replaying' AND m.search_hashes @> ARRAY[$1::bigint] AND m.search_keys @> ARRAY[$2::text]`,
		store.KeyHash("msg-abc-123"), "msg-abc-123")
	require.Contains(t, plan, "dead_messages_search", plan)
	plan = explain(`SELECT m.id FROM dead_messages m WHERE m.status <> 'replaying' AND m.search_hashes @> $1::bigint[]`, store.KeyHashes([]string{"msg-abc-123"}))
	require.Contains(t, plan, "dead_messages_search", plan)
	plan = explain(`SELECT m.id FROM dead_messages m WHERE m.source_queue = $1 AND m.status = 'pending' AND m.failed_at >= $2
		AND position($3::bytea IN m.body) > 0 ORDER BY m.id + 0 DESC LIMIT 51`, "orders", time.Now().Add(-time.Hour), []byte("SKU-42"))
	require.Contains(t, plan, "dead_messages_queue_status_failed_at", plan)
	// The status and the time range bound the index read. Written as all
	// three statuses the index holds, the status would equal the index's
	// predicate, be dropped from the index conditions, and leave the time
	// range bounding nothing: so the store asks one status at a time.
	require.Regexp(t, `Index Cond: \(\(source_queue = .*\) AND \(status = 'pending'::text\) AND \(failed_at >= `, plan)
	plan = explain(`SELECT m.id FROM dead_messages m WHERE m.source_queue = $1 AND m.status IN ('pending', 'replayed', 'acknowledged') AND m.failed_at >= $2
		AND position($3::bytea IN m.body) > 0 ORDER BY m.id + 0 DESC LIMIT 51`, "orders", time.Now().Add(-time.Hour), []byte("SKU-42"))
	require.NotContains(t, plan, "status = ANY", "PostgreSQL now keeps a condition equal to the index predicate; searchIDs' body part could be one query again:\n"+plan)

	// The key is found whatever the case of q, through the listing.
	for _, q := range []string{"Msg-ABC-123", "MSG-abc-123"} {
		page, err := st.ListMessages(ctx, store.Filter{Status: "all", Query: q}, store.ListOptions{})
		require.NoError(t, err)
		require.Len(t, page.Messages, 1, q)
	}
	after := time.Now().Add(-time.Hour)
	page, err := st.ListMessages(ctx, store.Filter{Status: "all", SourceQueue: "orders", FailedAfter: &after, Query: `"sku":"SKU-42"`}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
}

// TestKeyHashMatchesSQL holds store.KeyHash and the SQL that migration
// 00050 fills search_hashes with to the same value: a row migrated with
// one and searched with the other must be found.
func TestKeyHashMatchesSQL(t *testing.T) {
	t.Parallel()
	_, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	keys := []string{"", "a", "msg-abc-123", "tenant-7", "0f8fad5b-d9cb-469f-a165-70867728950e",
		"grüße", "日本語のキー", strings.Repeat("x", 128), "with space", "quote'and\\back"}
	var sql []int64
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT array_agg(('x' || left(md5(k), 16))::bit(64)::bigint ORDER BY n) FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n)`,
		keys).Scan(&sql))
	require.Equal(t, sql, store.KeyHashes(keys))
}
