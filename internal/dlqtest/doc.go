// Package dlqtest gives tests isolated pieces of the real servers: a fresh
// PostgreSQL schema per test (migrated, dropped afterwards), unique RabbitMQ
// names, a raw AMQP connection for playing the application's part, a pool
// of the test's own on its schema (DB) for reading and changing rows with
// SQL directly, and polling helpers so no test sleeps to wait for an effect.
// Fixtures more than one package's tests need live here too: a source
// queue that dead-letters and a rejecter (queues.go), a job lease and
// ingest_inflight rows (jobs.go), and InUTC for comparing headers that
// went through RabbitMQ (headers.go).
//
// TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test) and
// DLQ_TEST_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/) point at
// the servers. Fault tests stop, start and inspect them through commands
// that can be overridden (servers.go): DLQ_TEST_RABBITMQCTL,
// DLQ_TEST_PG_STOP and DLQ_TEST_PG_START.
package dlqtest
