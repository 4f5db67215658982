// Package config loads dlq's settings from, in rising precedence, built-in
// defaults, an optional YAML file (--config), environment variables and
// command-line flags.
//
// The environment variable names are part of dlq's public contract
// (DLQ_AMQP_URL, DLQ_DATABASE_URL, DLQ_HTTP_ADDR, DLQ_EXCHANGE, DLQ_QUEUES,
// DLQ_CONTROL_QUEUE, DLQ_ADMIN_TOKEN) and never change meaning. Every error
// names the setting that was wrong, where it came from, and what is accepted,
// so an operator can fix it without reading the source.
package config
