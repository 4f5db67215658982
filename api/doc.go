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
// routes.go holds the one route table: method and path, the operation of
// package ops it performs (whose least role, ops.RoleFor, makes the table
// the permission matrix), the query parameters the route takes, whether it
// takes a body, and the handler. The tests hold openapi.yaml and the auth
// matrix to it, so a route cannot be added without both. guard applies it
// in a fixed order — throttle an address that sent too many wrong tokens
// (429), authenticate (401), rate limit per token (429), role (403,
// ops.Authorize, before the request is read), body limit (413), refuse
// unknown or repeated query parameters and a body where none is taken
// (400) — so an unauthenticated caller learns nothing about rate limits,
// roles or parameters.
//
// withRecover turns a handler's panic into a logged 500 in the envelope,
// so one bad request costs neither the server nor the request id.
//
// # Handlers
//
// Handlers only decode (a parameter that cannot be read is a 400 naming
// it; unknown body fields are errors too), call the operations layer
// (package ops), which owns every rule — role, queue scope, task
// visibility, the confirmation threshold, body visibility, audit — and
// encode; writeErr maps the layer's errors to statuses in one place.
package api
