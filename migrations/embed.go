// Package migrations holds dlq's SQL schema migrations, embedded into the
// binary so `dlq migrate` and `dlq serve` need no files on disk.
//
// Files are numbered goose migrations (NNNNN_name.sql with -- +goose Up/Down
// sections). A migration, once released, is never edited: a change to the
// schema is a new file. Numbers are allocated per concern so that work on
// separate features does not collide.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
