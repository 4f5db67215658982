// Package bench holds dlq's own benchmarks, run by cmd/dlq-bench against
// the local RabbitMQ and PostgreSQL: `dlq-bench <name> [flags]`, usually
// through `make bench-<name>`, which runs them in database `bench`
// (BENCH_DATABASE_URL), never in the test database.
//
// Each benchmark is one exported function taking its command line (API,
// Cleanup, Ingest, Replay, in api.go, cleanup.go, ingest.go and replay.go)
// and one entry of the table in cmd/dlq-bench, so adding one is a new file
// and a one-line edit there. Each run makes its own schema, exchange and
// queues. What a benchmark needs of the database beyond dlq's own
// operations (schemas, generated rows written with COPY, indexes to drop,
// samples to search for) is store's benchmark support (store/bench.go):
// no SQL here. Figures are printed (and appended as JSON lines with -out),
// never asserted: they are compared with the raw limits of the machine
// measured in the same session (see docs/BENCHMARKS.md). The one exception
// is RoundsVerdict (rounds.go), not a benchmark: the guard of
// scripts/bench-ingest-rounds.sh, which reads the rounds' results and fails
// when HEAD's ingest fell behind a baseline's.
package bench
