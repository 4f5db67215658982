-- +goose Up

-- A dead message with a 1 KiB body and a dead-lettered message's headers is
-- just over PostgreSQL's default 2 KB toast threshold, so every insert
-- tried to compress its columns (pglz, failing on random bodies): CPU spent
-- on each row of each ingest batch. Rows up to a page are now stored
-- inline as they are; larger ones are still toasted.
ALTER TABLE dead_messages SET (toast_tuple_target = 8160);

-- What is toasted is compressed with lz4 (several times faster than pglz)
-- where the server was built with it; otherwise the default stays.
-- +goose StatementBegin
DO $$
BEGIN
    ALTER TABLE dead_messages
        ALTER COLUMN body SET COMPRESSION lz4,
        ALTER COLUMN headers SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 is not available; dead_messages keeps the default compression';
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE dead_messages RESET (toast_tuple_target);
ALTER TABLE dead_messages
    ALTER COLUMN body SET COMPRESSION default,
    ALTER COLUMN headers SET COMPRESSION default;
