-- +goose Up

-- The text indexer's place in the id order (store/textindex.go): every
-- plain row with an id up to last_id has its document in message_text
-- (or is sealed, or was deleted); the rows above it are the ones waiting,
-- which searches read one by one through the primary key (the newest
-- store.TextTailMax of them). New rows need nothing else, so ingest
-- writes nothing for text search; text_index_queue (00079) keeps only
-- the rows that change after they are stored (returned to record,
-- backfilled).
--
-- Ids come from a sequence, so transactions commit out of id order: the
-- mark may only pass an id once no transaction can still commit it. The
-- indexer notes a target, next_id (the newest id it sees), with
-- next_writers (the virtual transaction ids of the transactions then
-- holding dead_messages to write), and walks up to next_id only once
-- none of them runs any more.
--
-- One row. It starts at the newest id when rows already wait through the
-- queue or have documents (a database that ran the earlier 00079, which
-- queued every row), else at 0: the indexer then walks every row stored
-- before text search existed.
CREATE TABLE IF NOT EXISTS text_index_mark (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    last_id      bigint NOT NULL,
    next_id      bigint,
    next_writers text[]
);

INSERT INTO text_index_mark (last_id)
SELECT CASE WHEN EXISTS (SELECT 1 FROM text_index_queue) OR EXISTS (SELECT 1 FROM message_text)
    THEN coalesce((SELECT max(id) FROM dead_messages), 0) ELSE 0 END
ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE IF EXISTS text_index_mark;
