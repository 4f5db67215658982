// Command dlq-bench runs dlq's own benchmarks against the local RabbitMQ and
// PostgreSQL: `dlq-bench <name> [flags]`, usually through `make bench-<name>`.
// main.go holds the table of benchmarks; each is a function of package
// internal/bench, which documents them.
package main
