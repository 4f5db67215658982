-- +goose NO TRANSACTION
-- +goose Up

-- The text indexer wrote each document under a row lock on its
-- dead_messages row (FOR KEY SHARE, the lock message_text's foreign key
-- takes anyway). A row lock writes the heap page: a WAL record for every
-- row, and, for a page last written before the latest checkpoint, a full
-- image of it. Ingest of a backlog runs well ahead of the indexer, so
-- nearly every page was behind a checkpoint by the time its rows were
-- indexed: in a drain of 1,000,000 dead letters the locks wrote 2.6 KB of
-- WAL a message, as much as the rows themselves, and wrote every page of
-- the table a second time (docs/BENCHMARKS.md, "WAL of a drain").
--
-- The lock kept two writers from leaving a document behind: one that
-- deletes the row (retention, capacity, delete actions) and one that
-- seals it (encryption at rest), where a document left behind would keep
-- the sealed text in plain. They now meet on a transaction-level advisory
-- lock instead, which writes nothing: the indexer holds it exclusively
-- while it writes documents (store.IndexText); a statement that deletes
-- rows or seals them takes it shared, in the triggers below, before it
-- deletes their documents. Whichever comes second waits for the first
-- to commit and then sees its work: a document written before the
-- deleting statement got the lock is deleted by it; a row deleted or
-- sealed before the indexer got it is no longer a plain row to the
-- indexer's next statement. The lock's second key is the table's oid, so
-- schemas (one per test) do not wait for each other.
--
-- The triggers serve every version of dlq that writes this schema: an
-- instance of the version before this migration deletes and seals rows
-- as it did, and the triggers delete the documents; its indexer still
-- locks rows, which keeps it apart from both as before. The foreign key
-- goes last, once the triggers delete what its cascade deleted.
--
-- Functions and triggers only, then the constraint: no row is read or
-- written. Dropping the constraint locks both tables for an instant
-- (store.MigrationLockTimeout bounds the wait).

-- One function for both triggers: a row deleted, or sealed, loses its
-- document. Row-level, as the foreign key's cascade was: a delete by
-- filter may take a million rows in one statement, and a statement-level
-- trigger would first copy them all into its transition table. The lock
-- is taken once a transaction; a second call finds it held.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dlq_text_document_gone() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1684828532, TG_RELID::int);
    DELETE FROM message_text WHERE id = OLD.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER dead_messages_text_deleted
    AFTER DELETE ON dead_messages
    FOR EACH ROW
    EXECUTE FUNCTION dlq_text_document_gone();

-- Only statements that set enc_key_id consider it (sealing, and a sealed
-- return at ingest); ingest's inserts, claims and settlements do not, and
-- a rekey of a sealed row passes the WHEN (a sealed row has no document).
CREATE OR REPLACE TRIGGER dead_messages_text_sealed
    AFTER UPDATE OF enc_key_id ON dead_messages
    FOR EACH ROW
    WHEN (OLD.enc_key_id IS NULL AND NEW.enc_key_id IS NOT NULL)
    EXECUTE FUNCTION dlq_text_document_gone();

ALTER TABLE message_text DROP CONSTRAINT IF EXISTS message_text_id_fkey;

-- +goose Down
-- Documents of rows deleted since are dropped, then the foreign key comes
-- back unchecked and is validated without blocking writers.
DELETE FROM message_text t WHERE NOT EXISTS (SELECT 1 FROM dead_messages m WHERE m.id = t.id);
ALTER TABLE message_text ADD CONSTRAINT message_text_id_fkey
    FOREIGN KEY (id) REFERENCES dead_messages (id) ON DELETE CASCADE NOT VALID;
ALTER TABLE message_text VALIDATE CONSTRAINT message_text_id_fkey;
DROP TRIGGER IF EXISTS dead_messages_text_sealed ON dead_messages;
DROP TRIGGER IF EXISTS dead_messages_text_deleted ON dead_messages;
DROP FUNCTION IF EXISTS dlq_text_document_gone();
