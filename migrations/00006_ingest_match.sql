-- +goose Up

-- Redelivery matching looks rows up by (batch, fingerprint) for each
-- unconfirmed batch; the batch-only index made it walk every row of the
-- batch.
DROP INDEX dead_messages_ingest_batch;
CREATE INDEX dead_messages_ingest_match ON dead_messages (ingest_batch, fingerprint) WHERE ingest_batch IS NOT NULL;

-- +goose Down
DROP INDEX dead_messages_ingest_match;
CREATE INDEX dead_messages_ingest_batch ON dead_messages (ingest_batch) WHERE ingest_batch IS NOT NULL;
