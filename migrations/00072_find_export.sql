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

-- +goose Down
DROP FUNCTION dlq_body_json(bytea);
