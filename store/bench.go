package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlq/dlq/internal/redact"
)

// Benchmark support. dlq's benchmarks (cmd/dlq-bench, package
// internal/bench) build, inspect and tune the schemas they measure in with
// statements dlq itself never runs: they write generated rows straight
// with COPY, derive the counter tables from them, drop indexes to price
// them, and read samples to search for. Those statements live here, with
// the rest of the program's SQL; nothing in dlq calls them.

// BenchAdmin is a connection to a benchmark database itself (no schema on
// its search path), for what comes before and after a store: creating and
// dropping the schema a run measures in, and looking at other sessions.
type BenchAdmin struct {
	conn *pgx.Conn
}

// OpenBenchAdmin connects to databaseURL.
func OpenBenchAdmin(ctx context.Context, databaseURL string) (*BenchAdmin, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: connect to %s: %w", redact.URL(databaseURL), err)
	}
	return &BenchAdmin{conn: conn}, nil
}

// Close closes the connection.
func (a *BenchAdmin) Close(ctx context.Context) { _ = a.conn.Close(ctx) }

// CreateSchema creates an empty schema.
func (a *BenchAdmin) CreateSchema(ctx context.Context, schema string) error {
	if _, err := a.conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("store: create schema %s: %w", schema, err)
	}
	return nil
}

// DropSchema drops a schema and everything in it, if it exists.
func (a *BenchAdmin) DropSchema(ctx context.Context, schema string) error {
	if _, err := a.conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("store: drop schema %s: %w", schema, err)
	}
	return nil
}

// Checkpoint writes every dirty page out now, so that a measurement that
// follows does not pay for the writes of what was done before it.
func (a *BenchAdmin) Checkpoint(ctx context.Context) error {
	if _, err := a.conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	return nil
}

// CountSchemaMessages counts the rows of schema's dead_messages, to reuse
// a schema generated before.
func (a *BenchAdmin) CountSchemaMessages(ctx context.Context, schema string) (int64, error) {
	var n int64
	if err := a.conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "dead_messages"}.Sanitize()).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count the messages of schema %s: %w", schema, err)
	}
	return n, nil
}

// BackendPIDs returns the process ids of the server backends of the
// sessions named applicationName, whose CPU time a benchmark reads.
func (a *BenchAdmin) BackendPIDs(ctx context.Context, applicationName string) ([]int, error) {
	rows, err := a.conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, applicationName)
	if err != nil {
		return nil, fmt.Errorf("store: backends of %q: %w", applicationName, err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("store: backends of %q: %w", applicationName, err)
	}
	return pids, nil
}

// benchDB is what Bench runs its statements on: the store's pool, or one
// connection of it (Maintenance).
type benchDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// Bench runs the benchmarks' statements in a store's schema.
type Bench struct {
	pool *pgxpool.Pool
	db   benchDB
}

// Bench returns the store's benchmark support.
func (s *Store) Bench() Bench { return Bench{pool: s.pool, db: s.pool} }

// Maintenance runs fn with a Bench bound to one connection that may use a
// gigabyte of memory and two parallel workers for maintenance (building
// indexes, VACUUM): what loading millions of generated rows wants.
func (b Bench) Maintenance(ctx context.Context, fn func(Bench) error) error {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: acquire a maintenance connection: %w", err)
	}
	defer conn.Release()
	for _, q := range []string{`SET maintenance_work_mem = '1GB'`, `SET max_parallel_maintenance_workers = 2`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("store: %s: %w", q, err)
		}
	}
	return fn(Bench{pool: b.pool, db: conn})
}

// CopyMessages writes rows straight into dead_messages with COPY: next
// returns the values of the given columns for one row, or nil after the
// last. Nothing else is written: the counter tables are derived afterwards
// (DeriveQueueSummary and the like).
func (b Bench) CopyMessages(ctx context.Context, columns []string, next func() ([]any, error)) (int64, error) {
	n, err := b.db.CopyFrom(ctx, pgx.Identifier{"dead_messages"}, columns, pgx.CopyFromFunc(next))
	if err != nil {
		return n, fmt.Errorf("store: copy into dead_messages: %w", err)
	}
	return n, nil
}

// BenchIndex is an index of dead_messages: its name and its definition
// (a CREATE INDEX statement).
type BenchIndex struct {
	Name, Def string
}

// SecondaryIndexes returns the indexes of schema's dead_messages other than
// its primary key, so that they can be dropped before a load and rebuilt
// after it.
func (b Bench) SecondaryIndexes(ctx context.Context, schema string) ([]BenchIndex, error) {
	rows, err := b.db.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
WHERE schemaname = $1 AND tablename = 'dead_messages' AND indexname <> 'dead_messages_pkey'`, schema)
	if err != nil {
		return nil, fmt.Errorf("store: list the indexes of %s.dead_messages: %w", schema, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BenchIndex, error) {
		var i BenchIndex
		return i, r.Scan(&i.Name, &i.Def)
	})
	if err != nil {
		return nil, fmt.Errorf("store: list the indexes of %s.dead_messages: %w", schema, err)
	}
	return out, nil
}

// DropIndex drops schema's index.
func (b Bench) DropIndex(ctx context.Context, schema, index string) error {
	if _, err := b.db.Exec(ctx, "DROP INDEX "+pgx.Identifier{schema, index}.Sanitize()); err != nil {
		return fmt.Errorf("store: drop index %s.%s: %w", schema, index, err)
	}
	return nil
}

// CreateIndex rebuilds an index from its definition (BenchIndex.Def).
func (b Bench) CreateIndex(ctx context.Context, ix BenchIndex) error {
	if _, err := b.db.Exec(ctx, ix.Def); err != nil {
		return fmt.Errorf("store: rebuild %s: %w", ix.Name, err)
	}
	return nil
}

// CreatePendingFailedAtIndex creates the index that status and alerts
// would read without body search: pending messages by queue and time
// (the one migration 00050 replaced with an index of every status), to
// price the search indexes at ingest.
func (b Bench) CreatePendingFailedAtIndex(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `CREATE INDEX dead_messages_pending_failed_at ON dead_messages (source_queue, failed_at) WHERE status = 'pending'`); err != nil {
		return fmt.Errorf("store: create dead_messages_pending_failed_at: %w", err)
	}
	return nil
}

// DisableAutovacuum keeps autovacuum off dead_messages, so that the work
// a write leaves for later is done, and counted, where a benchmark says.
func (b Bench) DisableAutovacuum(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `ALTER TABLE dead_messages SET (autovacuum_enabled = false)`); err != nil {
		return fmt.Errorf("store: disable autovacuum on dead_messages: %w", err)
	}
	return nil
}

// FlushSearchIndexes merges the pending lists of the GIN indexes that
// exist (the search keys' and the text documents') into the indexes: the
// deferred part of what ingest costs them.
func (b Bench) FlushSearchIndexes(ctx context.Context) error {
	_, err := b.db.Exec(ctx, `SELECT gin_clean_pending_list(c.oid) FROM pg_class c
WHERE c.relname IN ('dead_messages_search', 'dead_messages_text', 'message_text_document') AND c.relnamespace = to_regnamespace(current_schema())::oid`)
	if err != nil {
		return fmt.Errorf("store: flush the pending lists of the GIN indexes: %w", err)
	}
	return nil
}

// OpenConnections makes the pool open n connections (it opens them
// lazily), so that their backends exist before a measurement starts.
func (b Bench) OpenConnections(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = b.pool.Exec(ctx, `SELECT pg_sleep(0.05)`) }()
	}
	wg.Wait()
}

// SyncIDSequence moves the id sequence past the ids written by COPY.
func (b Bench) SyncIDSequence(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `SELECT setval(pg_get_serial_sequence('dead_messages', 'id'), (SELECT max(id) FROM dead_messages))`); err != nil {
		return fmt.Errorf("store: set the dead_messages id sequence: %w", err)
	}
	return nil
}

// DeriveQueueSummary fills queue_summary from dead_messages.
func (b Bench) DeriveQueueSummary(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `INSERT INTO queue_summary (source_queue, status, messages, bytes)
		 SELECT source_queue, status, count(*), sum(body_size) FROM dead_messages GROUP BY 1, 2`); err != nil {
		return fmt.Errorf("store: derive queue_summary: %w", err)
	}
	return nil
}

// DeriveFailureGroups fills failure_groups from dead_messages, each group's
// pattern normalised from its sample as ingest does it. It returns how
// many groups there are.
func (b Bench) DeriveFailureGroups(ctx context.Context) (int, error) {
	if _, err := b.db.Exec(ctx, `INSERT INTO failure_groups (id, source_queue, reason, failure_type, pattern, sample_message,
		     pending, replaying, replayed, acknowledged, first_seen, last_seen)
		 SELECT group_id, min(source_queue), min(reason), coalesce(min(failure_type), ''), '', coalesce(min(failure_message), ''),
		     count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'replaying'),
		     count(*) FILTER (WHERE status = 'replayed'), count(*) FILTER (WHERE status = 'acknowledged'),
		     min(failed_at), max(failed_at)
		 FROM dead_messages GROUP BY group_id`); err != nil {
		return 0, fmt.Errorf("store: derive failure_groups: %w", err)
	}
	rows, err := b.db.Query(ctx, `SELECT id, sample_message FROM failure_groups`)
	if err != nil {
		return 0, fmt.Errorf("store: read failure group samples: %w", err)
	}
	type sample struct {
		id  int64
		msg string
	}
	samples, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sample, error) {
		var s sample
		return s, r.Scan(&s.id, &s.msg)
	})
	if err != nil {
		return 0, fmt.Errorf("store: read failure group samples: %w", err)
	}
	for _, s := range samples {
		if _, err := b.db.Exec(ctx, `UPDATE failure_groups SET pattern = $2 WHERE id = $1`, s.id, NormalizeFailure(s.msg)); err != nil {
			return 0, fmt.Errorf("store: set the pattern of failure group %d: %w", s.id, err)
		}
	}
	return len(samples), nil
}

// DeriveQueueActivity fills queue_activity with the last 25 hours of
// dead_messages.
func (b Bench) DeriveQueueActivity(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `INSERT INTO queue_activity (source_queue, hour, new, acknowledged, replayed)
		 SELECT source_queue, date_trunc('hour', failed_at), count(*),
		     count(*) FILTER (WHERE status = 'acknowledged'), count(*) FILTER (WHERE status = 'replayed')
		 FROM dead_messages WHERE failed_at > now() - interval '25 hours' GROUP BY 1, 2`); err != nil {
		return fmt.Errorf("store: derive queue_activity: %w", err)
	}
	return nil
}

// VacuumAnalyze vacuums and analyzes one of the store's tables.
func (b Bench) VacuumAnalyze(ctx context.Context, table string) error {
	if _, err := b.db.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{table}.Sanitize()); err != nil {
		return fmt.Errorf("store: vacuum analyze %s: %w", table, err)
	}
	return nil
}

// Analyze analyzes one of the store's tables.
func (b Bench) Analyze(ctx context.Context, table string) error {
	if _, err := b.db.Exec(ctx, "ANALYZE "+pgx.Identifier{table}.Sanitize()); err != nil {
		return fmt.Errorf("store: analyze %s: %w", table, err)
	}
	return nil
}

// Checkpoint writes every dirty page out, so that a measurement does not
// pay for the writes of the load before it.
func (b Bench) Checkpoint(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	return nil
}

// WALPosition is how many bytes of WAL the server has written since its
// start (the current WAL position): two readings give the WAL of what ran
// between them.
func (b Bench) WALPosition(ctx context.Context) (int64, error) {
	var n int64
	if err := b.db.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: current WAL position: %w", err)
	}
	return n, nil
}

// MessagesSize is the size of dead_messages with its indexes, for humans
// (pg_size_pretty).
func (b Bench) MessagesSize(ctx context.Context) (string, error) {
	var size string
	if err := b.db.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('dead_messages'))`).Scan(&size); err != nil {
		return "", fmt.Errorf("store: size of dead_messages: %w", err)
	}
	return size, nil
}

// CountMessages counts the rows of dead_messages (a full scan: to check a
// run's outcome, not to poll).
func (b Bench) CountMessages(ctx context.Context) (int64, error) {
	var n int64
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM dead_messages`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count dead_messages: %w", err)
	}
	return n, nil
}

// SummaryCount is the number of stored messages by queue_summary: O(1),
// unlike CountMessages, so polling it does not load the database being
// measured.
func (b Bench) SummaryCount(ctx context.Context) (int64, error) {
	var n int64
	if err := b.db.QueryRow(ctx, `SELECT coalesce(sum(messages), 0)::bigint FROM queue_summary`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: sum queue_summary: %w", err)
	}
	return n, nil
}

// AnyResolved reports whether a resolved (replayed or acknowledged)
// message is left.
func (b Bench) AnyResolved(ctx context.Context) (bool, error) {
	var left bool
	if err := b.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM dead_messages WHERE status IN ('replayed', 'acknowledged'))`).Scan(&left); err != nil {
		return false, fmt.Errorf("store: look for resolved messages: %w", err)
	}
	return left, nil
}

// CountResolved counts the resolved (replayed or acknowledged) messages.
func (b Bench) CountResolved(ctx context.Context) (int64, error) {
	var n int64
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM dead_messages WHERE status IN ('replayed', 'acknowledged')`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count resolved messages: %w", err)
	}
	return n, nil
}

// SampleSearchValues returns about n message ids and the trace-id header
// values of the same messages, sampled from a thousandth of the table's
// pages, to search for.
func (b Bench) SampleSearchValues(ctx context.Context, n int) (messageIDs, traceIDs []string, err error) {
	rows, err := b.db.Query(ctx, `SELECT message_id, headers->>'trace-id' FROM dead_messages TABLESAMPLE SYSTEM (0.1) LIMIT $1`, n)
	if err != nil {
		return nil, nil, fmt.Errorf("store: sample search values: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var m, t string
		if err := rows.Scan(&m, &t); err != nil {
			return nil, nil, fmt.Errorf("store: sample search values: %w", err)
		}
		messageIDs, traceIDs = append(messageIDs, m), append(traceIDs, t)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("store: sample search values: %w", err)
	}
	return messageIDs, traceIDs, nil
}

// BodyPhrase picks a phrase to search bodies for ("sku":"SKU-<n>") from
// a message a thousand ids before the newest, with that message's queue.
func (b Bench) BodyPhrase(ctx context.Context) (queue, phrase string, err error) {
	err = b.db.QueryRow(ctx, `SELECT source_queue, substring(convert_from(body, 'UTF8') from '"sku":"SKU-[0-9]+"')
		FROM dead_messages WHERE id = (SELECT max(id) - 1000 FROM dead_messages)`).Scan(&queue, &phrase)
	if err != nil {
		return "", "", fmt.Errorf("store: pick a body phrase: %w", err)
	}
	return queue, phrase, nil
}

// GroupByPending returns the id of the failure group at offset in the
// order of most pending messages first.
func (b Bench) GroupByPending(ctx context.Context, offset int) (int64, error) {
	var id int64
	if err := b.db.QueryRow(ctx, `SELECT id FROM failure_groups ORDER BY pending DESC LIMIT 1 OFFSET $1`, offset).Scan(&id); err != nil {
		return 0, fmt.Errorf("store: failure group %d by pending: %w", offset, err)
	}
	return id, nil
}

// LargestQueue returns the source queue that holds the most messages.
func (b Bench) LargestQueue(ctx context.Context) (string, error) {
	var q string
	if err := b.db.QueryRow(ctx, `SELECT source_queue FROM queue_summary GROUP BY 1 ORDER BY sum(messages) DESC LIMIT 1`).Scan(&q); err != nil {
		return "", fmt.Errorf("store: the largest queue: %w", err)
	}
	return q, nil
}
