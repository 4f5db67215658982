-- +goose NO TRANSACTION
-- +goose Up

-- Text search off the ingest path (docs/BENCHMARKS.md, "text search"):
-- the GIN index over the expression document of 00078 was maintained in
-- every ingest transaction and cost ingest more than half its throughput.
-- Now ingest only writes, in its own transaction, which rows need a
-- document (text_index_queue); the indexer (package textindex, run by
-- dlq serve) computes the documents into message_text, whose GIN index
-- the search reads, in bounded, paced batches.
--
-- message_text holds each indexed plain row's document, stored: the
-- index rechecks a phrase against the stored tsvector, where the
-- expression index computed the document again for every candidate row.
-- A document belongs to its row: deleting the row (retention, capacity,
-- delete actions, purge) deletes it (ON DELETE CASCADE).
CREATE TABLE IF NOT EXISTS message_text (
    id       bigint PRIMARY KEY REFERENCES dead_messages (id) ON DELETE CASCADE,
    document tsvector NOT NULL
);

-- A new table: empty, so built at once (CONCURRENTLY would wait for every
-- older transaction of the whole database).
CREATE INDEX IF NOT EXISTS message_text_document ON message_text USING gin (document);

-- Rows waiting for a document, written by every path that changes a
-- searchable row, in that path's own transaction: a return to record one
-- entry per batch, import one per import. (New rows wait above the
-- indexer's mark since 00090; until then ingest wrote one entry per
-- batch here.) A range [lo, hi) stands for every row in it (the rows stored
-- before this migration, dlq migrate -backfill-text), which the indexer
-- takes in chunks from the top. The indexer takes entries newest first
-- (FOR UPDATE SKIP LOCKED) and deletes them in the transaction that
-- writes their documents.
CREATE TABLE IF NOT EXISTS text_index_queue (
    seq bigserial PRIMARY KEY,
    ids bigint[],
    lo  bigint,
    hi  bigint,
    CONSTRAINT text_index_queue_entry CHECK (ids IS NOT NULL OR (lo IS NOT NULL AND hi IS NOT NULL AND lo < hi))
);

-- The rows stored so far wait for their documents through the indexer's
-- mark (00090, text_index_mark), not here: an entry queued here ran again
-- with the migration and queued every row a second time.

-- The old expression index goes: on an empty table at once, else
-- CONCURRENTLY, so that ingest and searches go on.
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM dead_messages LIMIT 1) THEN
        DROP INDEX IF EXISTS dead_messages_text;
    END IF;
END
$$;
-- +goose StatementEnd

SET lock_timeout = 0;
DROP INDEX CONCURRENTLY IF EXISTS dead_messages_text;
RESET lock_timeout;

-- +goose Down
DROP TABLE IF EXISTS text_index_queue;
DROP TABLE IF EXISTS message_text;
