package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/dlq/dlq/migrations"
)

// Online migrations (docs/UPGRADING.md). dlq serve applies pending
// migrations while other instances of dlq, this version's and the one
// before it, keep ingesting into the same tables. So a migration may hold
// a lock that stops ingest, replay claims or reads only for a moment: it
// changes the catalogue (a nullable column, a constant default, a new
// table), builds indexes CONCURRENTLY, and leaves work over existing rows
// to a backfill (backfill.go). What it cannot avoid is the moment itself:
// ALTER TABLE takes ACCESS EXCLUSIVE, if only for milliseconds, and while
// it waits for that lock every later statement on the table queues
// behind it. Behind a long transaction (a pg_dump, an export, a bulk
// acknowledge) the wait has no end, and neither has the stall. So every
// statement of a migration waits at most MigrationLockTimeout for a lock,
// and a migration that timed out is rolled back and tried again a moment
// later, as often as it takes; the test TestMigrationLocks holds each
// migration to it under load.

// MigrationLockTimeout bounds how long a migration statement waits for a
// lock (PostgreSQL's lock_timeout on the migrating session). Ingest queues
// behind a waiting ALTER TABLE, so this is the longest stall one attempt
// can cause; half of the second the upgrade rule allows
// (MaxMigrationStall), so that the statement's own work fits in the rest.
const MigrationLockTimeout = 500 * time.Millisecond

// MaxMigrationStall is the longest a migration may stop ingest, replay
// claims or reads of a table: about a second, what an operator does not
// notice in ingest's latency, against the half hour a full-table rewrite
// takes at 10 million rows. TestMigrationLocks measures it.
const MaxMigrationStall = time.Second

// migrationRetryPause is the pause between two attempts of a migration
// that timed out waiting for a lock: long enough for the statements that
// queued behind the attempt to run, jittered so that two waiters do not
// keep meeting.
const migrationRetryPause = time.Second

// MigrationResult says what Migrate applied.
type MigrationResult struct {
	From, To int64
	Applied  []string
	// Took is how long each applied migration took (its last attempt),
	// by file name.
	Took map[string]time.Duration
}

// Migrate applies every pending migration. It is safe to run from several
// instances at once: a PostgreSQL session lock serialises them, and the ones
// that wait find nothing left to do.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) (MigrationResult, error) {
	return s.MigrateTo(ctx, log, math.MaxInt64)
}

// MigrateTo applies the pending migrations numbered up to version, in
// order (TestMigrationLocks applies them one at a time).
func (s *Store) MigrateTo(ctx context.Context, log *slog.Logger, version int64) (MigrationResult, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res := MigrationResult{From: -1}
	for attempt := 1; ; attempt++ {
		r, err := s.migrateOnce(ctx, log, version)
		if res.From < 0 {
			res.From = r.From
		}
		res.To = max(res.To, r.To)
		res.Applied = append(res.Applied, r.Applied...)
		for name, d := range r.Took {
			if res.Took == nil {
				res.Took = map[string]time.Duration{}
			}
			res.Took[name] = d
		}
		if err == nil || !isLockTimeout(err) || ctx.Err() != nil {
			if err == nil && len(res.Applied) > 0 {
				took := make([]string, len(res.Applied))
				for i, name := range res.Applied {
					took[i] = fmt.Sprintf("%s=%s", name, res.Took[name].Round(time.Millisecond))
				}
				log.Info("migrations applied", "from_version", res.From, "to_version", res.To, "applied", res.Applied,
					"took", strings.Join(took, " "), "attempts", attempt)
			}
			return res, err
		}
		pause := migrationRetryPause + rand.N(migrationRetryPause)
		log.Warn("a migration waited too long for a lock and was rolled back; trying again (a long transaction holds the table)",
			"attempt", attempt, "error", err, "lock_timeout", MigrationLockTimeout, "retry_in", pause.Round(time.Millisecond),
			"oldest_transaction", s.oldestTransaction(ctx))
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("store: apply migrations: %w (gave up: %w)", err, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// migrateOnce is one attempt at applying the migrations up to version.
func (s *Store) migrateOnce(ctx context.Context, log *slog.Logger, version int64) (MigrationResult, error) {
	// The migrations run on connections of their own: lock_timeout is a
	// startup parameter there, so that it holds for every statement of
	// every migration and is what RESET goes back to (a migration turns
	// it off for CREATE INDEX CONCURRENTLY, which blocks nobody while it
	// waits), and they are named in pg_stat_activity for dlq migrate
	// --status.
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.Tracer = nil
	cfg.RuntimeParams["lock_timeout"] = fmt.Sprintf("%dms", MigrationLockTimeout.Milliseconds())
	cfg.RuntimeParams["application_name"] = migratorApplicationName
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return migrate(ctx, db, log, version)
}

// migratorApplicationName names the migrating sessions in pg_stat_activity.
const migratorApplicationName = "dlq migrate"

func migrate(ctx context.Context, db *sql.DB, log *slog.Logger, version int64) (MigrationResult, error) {
	// The lock is the schema's, not the database's: dlq instances sharing a
	// schema take turns, while dlq's in other schemas of the same database
	// (a test suite makes one per test) migrate side by side instead of
	// queueing behind one database-wide lock. Nothing in the migrations
	// reaches outside the schema.
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return MigrationResult{}, fmt.Errorf("store: read the current schema: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(&schemaLocker{id: schemaLockID(schema), schema: schema, log: log}),
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
	results, err := p.UpTo(ctx, version)
	var partial *goose.PartialError
	if errors.As(err, &partial) {
		results = partial.Applied
	}
	res := MigrationResult{From: from, To: from}
	for _, r := range results {
		res.Applied = append(res.Applied, r.Source.Path)
		res.To = max(res.To, r.Source.Version)
		if res.Took == nil {
			res.Took = map[string]time.Duration{}
		}
		res.Took[r.Source.Path] = r.Duration
	}
	if err != nil {
		if partial != nil {
			return res, fmt.Errorf("store: apply migration %s (schema at version %d): %w", partial.Failed.Source.Path, res.To, partial.Err)
		}
		return res, fmt.Errorf("store: apply migrations (schema at version %d): %w", res.To, err)
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

// schemaLocker is the migrations' session lock. goose's own gives up after
// five minutes, and dlq serve would then exit while another instance
// still builds an index of a large table: this one waits as long as the
// migrating instance works, and says so.
type schemaLocker struct {
	id     int64
	schema string
	log    *slog.Logger
}

// lockPoll is how often a waiting migrator asks for the lock again.
const lockPoll = time.Second

func (l *schemaLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	began := time.Now()
	for logged := false; ; {
		var ok bool
		if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, l.id).Scan(&ok); err != nil {
			return fmt.Errorf("store: take the migration lock of schema %s: %w", l.schema, err)
		}
		if ok {
			if logged {
				l.log.Info("migration lock taken", "schema", l.schema, "waited", time.Since(began).Round(time.Second))
			}
			return nil
		}
		if !logged {
			// The other migrator's instances keep ingesting, and so do
			// this version's, once it is done.
			l.log.Info("another dlq is migrating this schema; waiting for it (dlq migrate --status shows its progress)", "schema", l.schema)
			logged = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: wait for the migration lock of schema %s: %w", l.schema, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

func (l *schemaLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var ok bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, l.id).Scan(&ok); err != nil {
		return fmt.Errorf("store: release the migration lock of schema %s: %w", l.schema, err)
	}
	if !ok {
		return fmt.Errorf("store: release the migration lock of schema %s: not held", l.schema)
	}
	return nil
}

// oldestTransaction describes the oldest open transaction of the
// database other than this store's (what a migration that timed out
// waiting for a lock most likely waited for), for the log.
func (s *Store) oldestTransaction(ctx context.Context) string {
	var pid int
	var age time.Duration
	var state, query string
	err := s.pool.QueryRow(ctx, `
SELECT pid, now() - xact_start, coalesce(state, ''), left(query, 200)
FROM pg_stat_activity
WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
  AND application_name <> $1
ORDER BY xact_start LIMIT 1`, migratorApplicationName).Scan(&pid, &age, &state, &query)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("pid %d, open for %s, %s: %s", pid, age.Round(time.Second), state, query)
}
