// Command dlq is the dead-letter-queue manager: one binary that runs the
// service and operates it. `dlq help` lists every subcommand; `dlq <command>
// -h` its flags.
//
// Running it:
//
//	dlq serve      ingest, replay, cron jobs and the HTTP API, until SIGTERM
//	dlq migrate    apply the embedded database migrations, online, and exit;
//	               --status prints the migrations applied and pending, the
//	               one being applied now (its index build's progress) and
//	               the backfills' progress, and changes nothing
//	dlq topology   declare the dead-letter exchange, dlq's queues, the control
//	               queue and the configured source queues, and exit
//	dlq version    print the version (also dlq --version)
//
// Operating it (package internal/cli): ls, show, groups, stats, status,
// ack, rm, audit, jobs and alerts call the HTTP API (DLQ_URL, DLQ_TOKEN or
// DLQ_ADMIN_TOKEN);
// replay, replays and cancel send commands to the control queue
// (DLQ_AMQP_URL, DLQ_TOKEN or DLQ_ADMIN_TOKEN).
//
// Configuration comes from package config: defaults, an optional YAML file
// (--config), DLQ_* environment variables and the flags --amqp-url,
// --database-url, --http-addr and --no-migrate, each taken by the commands
// that use it (serve all four; migrate --database-url; rekey
// --database-url and --no-migrate; topology, replay, replays and cancel
// --amqp-url). A wrong value, or a file it names that cannot be used (a
// TLS certificate, a key file), stops the command before it does anything,
// with exit code 2. Commands that take no argument refuse one (exit 2)
// rather than ignore the flags after it.
//
// Every subcommand uses the same exit codes (internal/cli): 0 done, 1 the
// operation failed, 2 bad command line or configuration (including a
// topology RabbitMQ refuses), 3 a dependency is unreachable, 4 not found,
// 5 denied; and `dlq migrate --status` 6 when migrations are pending or
// being applied or a backfill pass is under way (0: nothing left to do).
//
// main only wires components together; serve.go writes down the order in
// which `dlq serve` starts them and, on SIGTERM, stops them. `dlq serve`
// migrates at start unless --no-migrate (online, while other instances of
// this dlq or the one before keep running: docs/UPGRADING.md; an instance
// that finds another migrating waits for it), and declares its topology in the
// background, retrying slowly when RabbitMQ refuses it (a queue that
// exists with other arguments): it logs why and keeps running instead of
// crash-looping. The process-level tests of the binary live in test/ingest.
package main
