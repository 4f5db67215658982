// Package migrations holds dlq's SQL schema migrations, embedded into the
// binary so `dlq migrate` and `dlq serve` need no files on disk. store.Migrate
// applies them with goose.
//
// Files are numbered goose migrations (NNNNN_name.sql with -- +goose Up/Down
// sections). A migration, once released, is never edited: a change to the
// schema is a new file. Numbers are allocated per concern so that work on
// separate features does not collide; a file may therefore land after a
// higher-numbered one, and store.Migrate applies such a file to a database
// that is already past its number. So a migration must not depend on one
// with a higher number.
//
// # Online
//
// Every migration after Baseline runs while other instances of dlq, this
// version's and the one before, ingest into the same tables
// (docs/UPGRADING.md). store.Migrate gives each statement a lock_timeout
// (store.MigrationLockTimeout) and tries a migration that timed out again;
// the rest is the migration's to keep:
//
//   - Change the catalogue, not the rows: nullable columns, constant
//     defaults, new tables, functions, triggers. No UPDATE, DELETE or
//     rewrite (a volatile default, a type change) of a table with rows:
//     work over existing rows is a backfill (store/backfill.go), and the
//     code reads right while the backfill has not reached a row.
//   - Build an index of a table that may have rows CONCURRENTLY, as 00072
//     does: drop an invalid leftover of an interrupted build first (IF NOT
//     EXISTS would keep it), build at once inside a DO block when the table
//     is empty (CONCURRENTLY would wait for every older transaction of the
//     database), else CONCURRENTLY between SET lock_timeout = 0 and RESET
//     lock_timeout. CONCURRENTLY needs -- +goose NO TRANSACTION.
//   - Hold at most one table with traffic per transaction: a transaction
//     that has locked one keeps it while it waits for the next. In a
//     NO TRANSACTION file each statement commits on its own, and an
//     attempt that stopped half way runs again: write every statement so
//     it can (IF NOT EXISTS, CREATE OR REPLACE, ON CONFLICT DO NOTHING).
//   - Leave what the earlier version reads meaning what it meant: it runs
//     on this schema until the roll ends, and again after a roll back.
//
// store's TestMigrationLocks applies every migration after Baseline under
// an earlier version's load and a long transaction and fails on a stall
// over store.MaxMigrationStall, a rewrite, a change to existing rows or an
// index built without CONCURRENTLY on a table with rows.
package migrations
