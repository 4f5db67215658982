package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Planner statistics where autovacuum does not keep them.
//
// dlq's connections keep each statement prepared, and PostgreSQL keeps a
// prepared statement's plan until the table's statistics change, which
// autovacuum's ANALYZE does as a table grows. Where autovacuum is off (a
// server setting some test and batch machines carry, or a table's
// autovacuum_enabled), a plan made while dead_messages was small stays for
// the connection's life (up to an hour): a replay claim planned that way
// read the whole table twice for every batch once it held more
// (TestReplayAfterTheTableGrew: 441,912 rows for ten claims at 20,000
// stored). The statistics job stands in for autovacuum's ANALYZE there,
// with autovacuum's own threshold, and does nothing where autovacuum runs.

// statisticsTables are dlq's tables that grow with the messages and their
// handling, and that parameterized statements read.
func statisticsTables() []string {
	return []string{"dead_messages", "message_text", "replay_task_items", "replay_claims", "failure_groups",
		"audit_log", "approval_items", "message_edits", "policy_attempts", "job_runs", "text_index_queue"}
}

// AnalyzedTable is a table RefreshStatistics analysed, with the rows
// changed since its previous statistics.
type AnalyzedTable struct {
	Table   string
	Changed int64
	// Skipped is set when the table's lock did not come within the wait
	// (another ANALYZE, VACUUM or index build held it): the next run tries
	// again.
	Skipped bool
	Took    time.Duration
}

// RefreshStatistics analyses each of dlq's tables whose statistics are
// stale by autovacuum's measure (more rows changed since its last ANALYZE
// than autovacuum_analyze_threshold plus autovacuum_analyze_scale_factor
// times its rows) and that autovacuum does not look after: autovacuum is
// off on the server or for the table. It waits at most lockWait for each
// table's lock; ANALYZE's lock lets reads and writes go on.
func (s *Store) RefreshStatistics(ctx context.Context, lockWait time.Duration) ([]AnalyzedTable, error) {
	rows, err := s.pool.Query(ctx, `
SELECT s.relid::regclass::text, s.n_mod_since_analyze
FROM pg_stat_user_tables s
JOIN pg_class c ON c.oid = s.relid
WHERE s.relid IN (SELECT to_regclass(t) FROM unnest($1::text[]) t)
  AND NOT (current_setting('autovacuum')::bool
           AND coalesce((SELECT o.option_value::bool FROM pg_options_to_table(c.reloptions) o
                         WHERE o.option_name = 'autovacuum_enabled'), true))
  AND s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8
      + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)
ORDER BY s.n_mod_since_analyze DESC`, planEachTime, statisticsTables())
	if err != nil {
		return nil, fmt.Errorf("store: find tables with stale statistics: %w", err)
	}
	stale, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AnalyzedTable, error) {
		var a AnalyzedTable
		return a, r.Scan(&a.Table, &a.Changed)
	})
	if err != nil {
		return nil, fmt.Errorf("store: find tables with stale statistics: %w", err)
	}
	for i := range stale {
		start := time.Now()
		skipped, err := s.analyze(ctx, stale[i].Table, lockWait)
		if err != nil {
			return stale[:i], err
		}
		stale[i].Skipped, stale[i].Took = skipped, time.Since(start)
	}
	return stale, nil
}

// analyze runs ANALYZE on table (a name as regclass prints it) within
// lockWait of waiting for its lock; skipped reports that the wait ran out.
func (s *Store) analyze(ctx context.Context, table string, lockWait time.Duration) (skipped bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("store: begin ANALYZE of %s: %w", table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", max(lockWait.Milliseconds(), 1))); err != nil {
		return false, fmt.Errorf("store: set the lock wait of ANALYZE %s: %w", table, err)
	}
	// table comes from regclass's output, which quotes what needs it.
	if _, err := tx.Exec(ctx, `ANALYZE `+table); err != nil {
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return true, nil
		}
		return false, fmt.Errorf("store: ANALYZE %s: %w", table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("store: commit ANALYZE %s: %w", table, err)
	}
	return false, nil
}
