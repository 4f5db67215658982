-- +goose Up

-- The earlier deaths of a message that was replayed and died again, oldest
-- first, at most store.DeathHistoryMax of them: each return to the record
-- appends the death it replaces (failed_at, reason, death_count,
-- dead_letter_queue, failure_type, failure_message). The latest death stays
-- in the row's own columns. NULL (no earlier death) costs ingest nothing;
-- the API shows it as [].
ALTER TABLE dead_messages ADD COLUMN death_history jsonb;

-- +goose Down
ALTER TABLE dead_messages DROP COLUMN death_history;
