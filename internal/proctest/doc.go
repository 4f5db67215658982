// Package proctest runs real `dlq serve` processes for process-level tests
// and counts what they stored the way a linearizability checker counts a
// queue: a publisher that gives every dead letter a unique id and records
// which publishes the broker confirmed and which are indeterminate (the
// connection died before the confirm), and a checker that reads every
// stored row back:
//
//   - lost: confirmed ids with no row;
//   - duplicated: ids with more than one row;
//   - unexpected: rows whose id was never published.
//
// test/ingest (one dlq at a time, killed, stopped and cut off from the
// shared servers) and test/cluster (several dlq instances, a RabbitMQ
// cluster, a PostgreSQL failover) share it; test/security and test/tls
// take its TestMain body (RunWithDLQ) and broker cleanup (DeleteTopology).
// Unit tests take LockedBuffer, for reading a log the code under test
// writes from another goroutine: this package depends on no dlq package,
// so even one that dlqtest imports (internal/tlsconf) can use it.
package proctest
