// Command dlq-bench runs dlq's own benchmarks against the local RabbitMQ and
// PostgreSQL: `dlq-bench <name> [flags]`, usually through `make bench-<name>`,
// which runs them in database `bench` (BENCH_DATABASE_URL), never in the test
// database.
//
// Each benchmark lives in its own file (ingest.go, replay.go, api.go,
// cleanup.go) and is one entry of the table in main.go, so adding one is a
// new file and a one-line edit. Each run makes its own schema, exchange and
// queues. Figures are printed (and appended as JSON lines with -out), never
// asserted: they are compared with the raw limits of the machine measured in
// the same session (see docs/BENCHMARKS.md).
package main
