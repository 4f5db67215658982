// Package api serves dlq over HTTP: the admin API under /api/v1, the
// health endpoints (/healthz: the process is up; /readyz: PostgreSQL and
// RabbitMQ are reachable and ingest works) and Prometheus metrics at
// /metrics.
//
// Every response carries an X-Request-Id header, and every error is the
// envelope {"error":{"code":"…","message":"…"},"request_id":"…"} with the
// matching status code, so scripts can rely on one shape.
package api
