// Package auth decides who a caller is and what it may do. The HTTP API and
// the control queue share one Authenticator so that a token means the same
// everywhere.
//
// Tokens come from configuration (DLQ_ADMIN_TOKEN and the api.tokens list).
// Only their SHA-256 digests are kept in memory, and a presented token is
// compared with every digest in constant time, so neither a memory dump nor
// response timing gives a token away. A configuration can hold the digest
// alone (token_sha256), keeping the secret out of files.
//
// Roles are ordered (viewer < operator < admin, see Principal.Can). A token
// may be restricted to some source queues; the store applies that scope to
// every query, so lists and counts never show other queues. Each token has
// its own rate limiter (token bucket), so one noisy script cannot starve
// the others.
package auth
