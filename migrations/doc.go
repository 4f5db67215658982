// Package migrations holds dlq's SQL schema migrations, embedded into the
// binary so `dlq migrate` and `dlq serve` need no files on disk. store.Migrate
// applies them with goose.
//
// Files are numbered goose migrations (NNNNN_name.sql with -- +goose Up/Down
// sections). A migration, once released, is never edited: a change to the
// schema is a new file. Numbers are allocated per concern so that work on
// separate features does not collide; a file may therefore land after a
// higher-numbered one, and store.Migrate applies such a file to a database
// that is already past its number. So a migration must not depend on one
// with a higher number.
package migrations
