package store

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"log/slog"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/dlq/dlq/migrations"
)

// MigrationResult says what Migrate applied.
type MigrationResult struct {
	From, To int64
	Applied  []string
}

// Migrate applies every pending migration. It is safe to run from several
// instances at once: a PostgreSQL session lock serialises them, and the ones
// that wait find nothing left to do.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) (MigrationResult, error) {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return migrate(ctx, db, log)
}

func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) (MigrationResult, error) {
	// The lock is the schema's, not the database's: dlq instances sharing a
	// schema take turns, while dlq's in other schemas of the same database
	// (a test suite makes one per test) migrate side by side instead of
	// queueing behind one database-wide lock. Nothing in the migrations
	// reaches outside the schema.
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return MigrationResult{}, fmt.Errorf("store: read the current schema: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(schemaLockID(schema)))
	if err != nil {
		return MigrationResult{}, fmt.Errorf("store: migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		// Numbers are allocated per concern (package migrations), so a
		// file can land after a higher-numbered one; a database migrated
		// in between gets it on its next migration instead of refusing.
		goose.WithAllowOutofOrder(true),
	)
	if err != nil {
		return MigrationResult{}, fmt.Errorf("store: load migrations: %w", err)
	}
	from, err := p.GetDBVersion(ctx)
	if err != nil {
		return MigrationResult{}, fmt.Errorf("store: read schema version: %w", err)
	}
	results, err := p.Up(ctx)
	res := MigrationResult{From: from, To: from}
	for _, r := range results {
		if r.Error != nil {
			continue
		}
		res.Applied = append(res.Applied, r.Source.Path)
		res.To = max(res.To, r.Source.Version)
	}
	if err != nil {
		return res, fmt.Errorf("store: apply migrations (schema at version %d): %w", res.To, err)
	}
	if log != nil && len(res.Applied) > 0 {
		log.Info("migrations applied", "from_version", res.From, "to_version", res.To, "applied", res.Applied)
	}
	return res, nil
}

// schemaLockID is the advisory lock id of a schema's migrations: goose's
// own id for the default schema, so that a dlq from before this change and
// one after it still exclude each other there, and a hash of the name for
// any other.
func schemaLockID(schema string) int64 {
	if schema == "public" {
		return lock.DefaultLockID
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte("dlq migrations " + schema))
	return int64(h.Sum64())
}
