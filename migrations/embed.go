package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS

// Baseline is the last migration of the schema dlq had before its
// migrations ran online (the tree of 2026-11-25, before the operations
// layer): every database of an earlier dlq has it. Each migration after it
// holds a lock that stops ingest, replay claims or reads for at most about
// a second (store.MaxMigrationStall; TestMigrationLocks applies every one
// under load) and leaves work over existing rows to a backfill. The ones
// up to it were written for a stopped dlq: on a database older than the
// baseline they rewrite and index tables while ingest waits
// (docs/UPGRADING.md, "Older databases").
const Baseline = 62
