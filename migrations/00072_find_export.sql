-- +goose NO TRANSACTION
-- +goose Up

-- NO TRANSACTION: the import index is built CONCURRENTLY (below), which a
-- transaction cannot hold. Each statement commits on its own, so each is
-- written to run again after an attempt that stopped half way (store
-- retries a migration that timed out waiting for a lock).

-- Field filters (store/fields.go) compare values inside JSON bodies. A body
-- is bytes; PostgreSQL 15 has no cast that answers NULL instead of failing,
-- so this function does: the body as jsonb when it is a JSON object or
-- array in UTF-8, NULL otherwise (binary, text, invalid UTF-8 or JSON), and
-- NULL matches no field filter. The first bytes are looked at before
-- anything is parsed, so a body that cannot be JSON costs no exception
-- block (a subtransaction). Only query_canceled escapes "others": a
-- statement timeout still ends a query that calls it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dlq_body_json(body bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    head bytea := substring(body FROM 1 FOR 64);
    i    int := 0;
    c    int;
BEGIN
    WHILE i < length(head) LOOP
        c := get_byte(head, i);
        EXIT WHEN c NOT IN (9, 10, 13, 32);
        i := i + 1;
    END LOOP;
    IF i = length(head) OR c NOT IN (91, 123) THEN -- '[' or '{'
        RETURN NULL;
    END IF;
    BEGIN
        RETURN convert_from(body, 'UTF8')::jsonb;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END;
END
$$;
-- +goose StatementEnd

-- Export and import (store/import.go). A dlq's database names itself with
-- one random id, its origin: every instance of dlq serve on the database
-- shares it, and an export says it on every line. An imported message
-- keeps where it was first stored, as (origin, id there): ids alone are
-- only unique within one database, and the pair tells two dlqs' message 7
-- apart. The unique index makes importing a line twice store it once; it
-- holds imported rows only. A database restored from another's backup
-- keeps the other's origin: give it a new one with
-- UPDATE dlq_origin SET id = gen_random_uuid() before exporting from both.
CREATE TABLE IF NOT EXISTS dlq_origin (
    id         uuid        NOT NULL DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now(),
    one_row    boolean     PRIMARY KEY DEFAULT true CHECK (one_row)
);
INSERT INTO dlq_origin DEFAULT VALUES ON CONFLICT DO NOTHING;

-- Adding nullable columns changes the catalogue only.
ALTER TABLE dead_messages ADD COLUMN IF NOT EXISTS imported_origin uuid, ADD COLUMN IF NOT EXISTS imported_id bigint;

-- The index reads the whole table. Built CONCURRENTLY, so that ingest and
-- the API go on meanwhile (docs/UPGRADING.md has its time per million
-- rows); rewritten before the first release, it was built with a SHARE
-- lock that stopped ingest for the whole build. The pattern, as in 00078:
--  1. a build that did not finish (cancelled, the server restarted)
--     leaves an invalid index, which IF NOT EXISTS would keep for good:
--     it is dropped first;
--  2. on an empty table (a new installation, every test schema) the index
--     is built at once: CONCURRENTLY would wait for every older
--     transaction of the whole database, other schemas' too;
--  3. otherwise CONCURRENTLY, with no lock_timeout: it blocks nobody
--     while it waits for older transactions to end.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('dead_messages_imported') AND NOT indisvalid) THEN
        DROP INDEX dead_messages_imported;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM dead_messages LIMIT 1) THEN
        CREATE UNIQUE INDEX IF NOT EXISTS dead_messages_imported ON dead_messages (imported_origin, imported_id)
            WHERE imported_origin IS NOT NULL;
    END IF;
END
$$;
-- +goose StatementEnd
SET lock_timeout = 0;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS dead_messages_imported ON dead_messages (imported_origin, imported_id)
    WHERE imported_origin IS NOT NULL;
RESET lock_timeout;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS dead_messages_imported;
ALTER TABLE dead_messages DROP COLUMN IF EXISTS imported_id, DROP COLUMN IF EXISTS imported_origin;
DROP TABLE IF EXISTS dlq_origin;
DROP FUNCTION IF EXISTS dlq_body_json(bytea);
