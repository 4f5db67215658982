// Package security holds the process-level tests of encryption at rest,
// redaction and secrets (docs/SECURITY.md): real RabbitMQ, real
// PostgreSQL and real `dlq serve` and `dlq rekey` processes. What is
// checked is what an attacker or an operator would see: the raw tables
// and a pg_dump of the schema, every read path of the API, the CLI, the
// console and the control queue, the messages a replay sends, and the
// process's logs.
//
// TLS against a RabbitMQ node and a PostgreSQL cluster started for the
// purpose is in test/tls (build tag tls, make test-tls).
package security
