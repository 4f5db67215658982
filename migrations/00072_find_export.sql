-- +goose Up

-- Field filters (store/fields.go) compare values inside JSON bodies. A body
-- is bytes; PostgreSQL 15 has no cast that answers NULL instead of failing,
-- so this function does: the body as jsonb when it is a JSON object or
-- array in UTF-8, NULL otherwise (binary, text, invalid UTF-8 or JSON), and
-- NULL matches no field filter. The first bytes are looked at before
-- anything is parsed, so a body that cannot be JSON costs no exception
-- block (a subtransaction). Only query_canceled escapes "others": a
-- statement timeout still ends a query that calls it.
-- +goose StatementBegin
CREATE FUNCTION dlq_body_json(body bytea) RETURNS jsonb
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
CREATE TABLE dlq_origin (
    id         uuid        NOT NULL DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now(),
    one_row    boolean     PRIMARY KEY DEFAULT true CHECK (one_row)
);
INSERT INTO dlq_origin DEFAULT VALUES;

-- Adding nullable columns rewrites nothing; the index reads the table once
-- (docs/OPERATIONS.md, Upgrading).
ALTER TABLE dead_messages ADD COLUMN imported_origin uuid, ADD COLUMN imported_id bigint;
CREATE UNIQUE INDEX dead_messages_imported ON dead_messages (imported_origin, imported_id)
    WHERE imported_origin IS NOT NULL;

-- +goose Down
DROP INDEX dead_messages_imported;
ALTER TABLE dead_messages DROP COLUMN imported_id, DROP COLUMN imported_origin;
DROP TABLE dlq_origin;
DROP FUNCTION dlq_body_json(bytea);
