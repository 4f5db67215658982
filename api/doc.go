// Package api serves dlq over HTTP: the admin API under /api/v1, the
// health endpoints (/healthz: the process is up; /readyz: PostgreSQL and
// RabbitMQ are reachable and ingest works) and Prometheus metrics at
// /metrics. docs/API.md describes the API for its users; openapi.yaml is
// its contract, embedded and served at /api/v1/openapi.yaml, and the tests
// validate real responses against it.
//
// Every response carries an X-Request-Id header, and every error is the
// envelope {"error":{"code":"…","message":"…"},"request_id":"…"} with the
// matching status code — ServeMux's own 404 and 405 included
// (withErrorEnvelope) — so scripts can rely on one shape.
//
// # Routes and permissions
//
// routes.go holds the one route table: method and path, least role, the
// query parameters the route takes, whether it takes a body, and the
// handler. The table is also the permission matrix; the tests hold
// openapi.yaml and the auth matrix to it, so a route cannot be added
// without both. guard applies it in a fixed order — throttle an address
// that sent too many wrong tokens (429), authenticate (401), rate limit
// per token (429), role (403), body limit (413), refuse unknown or
// repeated query parameters and a body where none is taken (400) — so an
// unauthenticated caller learns nothing about rate limits, roles or
// parameters. Scopes (a token's list of source queues) are not checked per
// route: they become part of the store.Filter (scoped), so every query,
// count and bulk change is restricted in SQL and nothing outside the scope
// can leak through a list, a search, stats or a group.
//
// withRecover turns a handler's panic into a logged 500 in the envelope,
// so one bad request costs neither the server nor the request id.
//
// # Handlers
//
// Handlers parse and validate (a bad parameter is a 400 naming it; unknown
// body fields are errors too), call the store or the replay service, and
// map errors to statuses in one place (writeErr).
// Cursors (cursor.go) are opaque, checksummed and bound to the query they
// were made for, so a cursor from other filters is refused instead of
// silently returning a wrong page.
package api
