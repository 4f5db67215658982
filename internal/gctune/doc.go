// Package gctune sets dlq's garbage collector defaults, shared by `dlq
// serve` and the ingest benchmark so that the benchmark measures what runs
// in production.
package gctune
