package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlq/dlq/migrations"
)

// MigrationsStatus is what dlq migrate --status shows: which migrations
// the schema has, which it lacks, the one being applied now, and the
// backfills. Reading it takes no lock and waits for no migration.
type MigrationsStatus struct {
	Schema string
	// Migrations are this dlq's, in order; AppliedAt is nil for one the
	// schema lacks.
	Migrations []MigrationInfo
	// Newer are migrations the schema has that this dlq does not know: a
	// later dlq applied them (this one runs on its schema during a
	// rolling upgrade, or after a roll back).
	Newer []MigrationInfo
	// Migrating is the session applying migrations now; nil when none is.
	Migrating *Migrator
	Backfills []BackfillState
}

// MigrationInfo is one migration.
type MigrationInfo struct {
	Version   int64
	Name      string
	AppliedAt *time.Time
	// Offline is set for the migrations up to MigrationBaseline, written
	// for a stopped dlq.
	Offline bool
}

// MigrationBaseline is migrations.Baseline: the last migration written for
// a stopped dlq; the ones after it run online.
const MigrationBaseline = migrations.Baseline

// Pending lists the migrations the schema lacks.
func (s MigrationsStatus) Pending() []MigrationInfo {
	var out []MigrationInfo
	for _, m := range s.Migrations {
		if m.AppliedAt == nil {
			out = append(out, m)
		}
	}
	return out
}

// Migrator is a session that holds the schema's migration lock.
type Migrator struct {
	PID int
	// Since is when its session began (the migrator opens one per
	// attempt).
	Since time.Time
	// State is pg_stat_activity's state; Waiting names what it waits for
	// (e.g. Lock/virtualxid: CREATE INDEX CONCURRENTLY waiting for older
	// transactions), "" when it runs; Query its statement.
	State, Waiting, Query string
	// IndexBuild is the index it is building, nil when none.
	IndexBuild *IndexBuild
}

// IndexBuild is an index build's progress (pg_stat_progress_create_index).
type IndexBuild struct {
	Index, Table, Command, Phase string
	BlocksDone, BlocksTotal      int64
	TuplesDone, TuplesTotal      int64
	LockersDone, LockersTotal    int64
}

// MigrationsStatus reads the schema's migrations, the migration in
// progress and the backfills.
func (s *Store) MigrationsStatus(ctx context.Context) (MigrationsStatus, error) {
	var st MigrationsStatus
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&st.Schema); err != nil {
		return st, fmt.Errorf("store: read the current schema: %w", err)
	}
	applied, err := s.appliedMigrations(ctx)
	if err != nil {
		return st, err
	}
	files, err := migrations.Files()
	if err != nil {
		return st, err
	}
	known := map[int64]bool{}
	for _, f := range files {
		known[f.Version] = true
		m := MigrationInfo{Version: f.Version, Name: f.Name, Offline: f.Version <= migrations.Baseline}
		if at, ok := applied[f.Version]; ok {
			m.AppliedAt = &at
		}
		st.Migrations = append(st.Migrations, m)
	}
	for v, at := range applied {
		if !known[v] && v > 0 {
			st.Newer = append(st.Newer, MigrationInfo{Version: v, AppliedAt: &at})
		}
	}
	slices.SortFunc(st.Newer, func(a, b MigrationInfo) int { return cmp.Compare(a.Version, b.Version) })
	if st.Migrating, err = s.migrator(ctx, schemaLockID(st.Schema)); err != nil {
		return st, err
	}
	if st.Backfills, err = s.ReadBackfills(ctx); err != nil {
		return st, err
	}
	for i, b := range st.Backfills {
		if b.Name == BackfillOlderRows && !b.Running() {
			if st.Backfills[i].Waiting, err = s.OlderRowsPending(ctx); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

// appliedMigrations maps each applied version to when: goose's table
// (its latest row of a version says whether it is applied). None before
// the first migration.
func (s *Store) appliedMigrations(ctx context.Context) (map[int64]time.Time, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("store: read applied migrations: %w", err)
	}
	out := map[int64]time.Time{}
	if !exists {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
SELECT DISTINCT ON (version_id) version_id, is_applied, tstamp FROM goose_db_version ORDER BY version_id, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("store: read applied migrations: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int64
		var ok bool
		var at time.Time
		if err := rows.Scan(&v, &ok, &at); err != nil {
			return nil, fmt.Errorf("store: read applied migrations: %w", err)
		}
		if ok {
			out[v] = at.UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read applied migrations: %w", err)
	}
	return out, nil
}

// migrator finds the session that holds advisory lock id (the schema's
// migration lock) and what it is doing.
func (s *Store) migrator(ctx context.Context, id int64) (*Migrator, error) {
	var m Migrator
	err := s.pool.QueryRow(ctx, `
SELECT a.pid, a.backend_start, coalesce(a.state, ''),
    coalesce(a.wait_event_type || '/' || a.wait_event, ''), left(coalesce(a.query, ''), 500)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1
LIMIT 1`, int64(uint64(id)>>32), int64(uint32(id))).Scan(&m.PID, &m.Since, &m.State, &m.Waiting, &m.Query)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: look for a migration in progress: %w", err)
	}
	m.Since = m.Since.UTC()
	var b IndexBuild
	err = s.pool.QueryRow(ctx, `
SELECT coalesce(i.relname, ''), coalesce(t.relname, ''), p.command, p.phase, p.blocks_done, p.blocks_total,
    p.tuples_done, p.tuples_total, p.lockers_done, p.lockers_total
FROM pg_stat_progress_create_index p
LEFT JOIN pg_class t ON t.oid = p.relid LEFT JOIN pg_class i ON i.oid = p.index_relid
WHERE p.pid = $1`, m.PID).Scan(&b.Index, &b.Table, &b.Command, &b.Phase, &b.BlocksDone, &b.BlocksTotal,
		&b.TuplesDone, &b.TuplesTotal, &b.LockersDone, &b.LockersTotal)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("store: read the progress of migration session %d: %w", m.PID, err)
	default:
		m.IndexBuild = &b
	}
	return &m, nil
}
