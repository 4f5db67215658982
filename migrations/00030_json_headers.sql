-- +goose Up

-- Headers and properties are written once, by the ingest batch, in the
-- typed form of broker.AppendHeadersJSON, and are read back whole (the API,
-- replay); nothing queries inside them except an occasional operator with
-- ->. jsonb made PostgreSQL parse and rebuild every header table at ingest,
-- its costliest per-row work after the indexes; json only checks the text
-- and keeps it byte for byte.
ALTER TABLE dead_messages
    ALTER COLUMN headers TYPE json USING headers::json,
    ALTER COLUMN properties TYPE json USING properties::json;

-- +goose Down
ALTER TABLE dead_messages
    ALTER COLUMN headers TYPE jsonb USING headers::jsonb,
    ALTER COLUMN properties TYPE jsonb USING properties::jsonb;
