// Package cluster holds the tests of dlq scaled out and kept up: several
// `dlq serve` instances on one database and one queue, a three-node
// RabbitMQ cluster that loses the node holding the queue's leader, and a
// PostgreSQL primary whose streaming standby is promoted, each during a
// burst of dead letters and during a replay; a replay through a rolling
// restart of the RabbitMQ cluster; and the rolling upgrade from
// the earlier version (EarlierVersion, built from the repository's git
// history into tmp/earlier/, so the tests need the history: a shallow
// clone does not have it) while dead letters keep arriving. They count the jepsen way
// (package internal/proctest): lost, duplicated and unexpected, asserted
// zero, except where the docs promise nothing (asynchronous replication,
// whose loss is measured and reported).
//
// The tests are slow and heavy and carry the build tag `cluster`:
//
//	make test-cluster
//
// They start extra servers of their own, on their own ports and data
// directories, and stop them however the tests end: three RabbitMQ nodes
// (rabbitmq-server and rabbitmqctl of RabbitMQ 3.10 or later under
// /usr/lib/rabbitmq/bin, run as root; DLQ_TEST_RABBITMQ_BIN names another
// folder) and PostgreSQL clusters made with initdb and pg_basebackup, run
// as the postgres user (the highest /usr/lib/postgresql/*/bin, or
// DLQ_TEST_PG_BIN). The machine's default RabbitMQ node and PostgreSQL
// cluster are used as the other tests use them (TEST_DATABASE_URL,
// DLQ_TEST_AMQP_URL), never stopped or reconfigured.
package cluster
