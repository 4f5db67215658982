// Package ingest holds process-level tests of dlq's ingest path: real
// RabbitMQ, real PostgreSQL and real `dlq serve` processes, killed,
// stopped and cut off from their servers while dead letters arrive.
//
// The tests count like a linearizability checker counts a queue: every
// published dead letter carries a unique id (in its body, and in its
// message-id for most), the test remembers which publishes the broker
// confirmed and which are indeterminate (the connection died before the
// confirm), and at the end it reads every stored row back:
//
//   - lost: confirmed ids with no row;
//   - duplicated: ids with more than one row;
//   - unexpected: rows whose id was never published.
//
// All three must be zero and dlq's queue must hold nothing, ready or
// unacknowledged. Indeterminate publishes may be stored once or not at all.
//
// Tests that restart the shared PostgreSQL or RabbitMQ, or close every
// broker connection, carry the build tag `faults` and names starting with
// TestFault: the Makefile runs them alone, after the rest of the suite,
// because they disturb every other test using the same servers.
package ingest
