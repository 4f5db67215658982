package store

import (
	"context"
	"fmt"
)

// Benchmark support for the text documents (message_text, migration
// 00079): building them in bulk for a generated schema, which dlq's
// indexer would take hours to go through at 10 million rows.

// benchTextDocument is the document IndexText writes, from the columns a
// generated row holds: header text (search_text) and body_text_bytes are
// written by the generator as ingest marked them under migration 00078.
const benchTextDocument = `setweight(dlq_search_document(m.failure_type, m.failure_message, m.failure, m.search_text, m.body, 0), 'A') ||
    dlq_search_document(NULL, NULL, NULL, NULL, m.body, m.body_text_bytes)`

// MessageIDRange returns the smallest id and one past the largest of
// dead_messages (0, 0 when empty).
func (b Bench) MessageIDRange(ctx context.Context) (lo, hi int64, err error) {
	if err := b.db.QueryRow(ctx, `SELECT coalesce(min(id), 0), coalesce(max(id) + 1, 0) FROM dead_messages`).Scan(&lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("store: id range of dead_messages: %w", err)
	}
	return lo, hi, nil
}

// DropTextDocumentIndex drops the GIN index of message_text, so that a
// bulk build inserts into a bare table and builds the index once after.
func (b Bench) DropTextDocumentIndex(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `DROP INDEX IF EXISTS message_text_document`); err != nil {
		return fmt.Errorf("store: drop message_text_document: %w", err)
	}
	return nil
}

// BuildTextDocuments writes the documents of the plain rows with ids in
// [lo, hi) that have none, and returns how many it wrote.
func (b Bench) BuildTextDocuments(ctx context.Context, lo, hi int64) (int64, error) {
	tag, err := b.db.Exec(ctx, `INSERT INTO message_text (id, document)
SELECT m.id, `+benchTextDocument+` FROM dead_messages m
WHERE m.id >= $1 AND m.id < $2 AND m.enc_key_id IS NULL
ON CONFLICT (id) DO NOTHING`, lo, hi)
	if err != nil {
		return 0, fmt.Errorf("store: build text documents of ids %d-%d: %w", lo, hi-1, err)
	}
	return tag.RowsAffected(), nil
}

// CreateTextDocumentIndex builds message_text's GIN index (as migration
// 00079 defines it).
func (b Bench) CreateTextDocumentIndex(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `CREATE INDEX IF NOT EXISTS message_text_document ON message_text USING gin (document)`); err != nil {
		return fmt.Errorf("store: build message_text_document: %w", err)
	}
	return nil
}

// ClearTextQueue empties text_index_queue and puts the indexer's mark
// at the newest row: every row has its document.
func (b Bench) ClearTextQueue(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `DELETE FROM text_index_queue`); err != nil {
		return fmt.Errorf("store: empty text_index_queue: %w", err)
	}
	if _, err := b.db.Exec(ctx, `UPDATE text_index_mark SET last_id = (SELECT coalesce(max(id), 0) FROM dead_messages), next_id = NULL, next_writers = NULL`); err != nil {
		return fmt.Errorf("store: move the text index mark to the newest row: %w", err)
	}
	return nil
}

// TextDocumentsSize returns the size of message_text and of its index,
// as PostgreSQL prints them.
func (b Bench) TextDocumentsSize(ctx context.Context) (table, index string, err error) {
	err = b.db.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('message_text') - pg_indexes_size('message_text')),
    pg_size_pretty(coalesce(pg_relation_size(to_regclass('message_text_document')), 0))`).Scan(&table, &index)
	if err != nil {
		return "", "", fmt.Errorf("store: size of message_text: %w", err)
	}
	return table, index, nil
}
