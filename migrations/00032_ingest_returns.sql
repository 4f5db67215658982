-- +goose Up

-- How many times the delivery a row was stored from had been returned to
-- dlq's queue before (the quorum queue's x-delivery-count), or -1 where the
-- broker did not say. Redelivery matching uses it to tell a redelivery of
-- the stored message from an identical twin: returns only grow, so a
-- delivery returned no more often than the row's own cannot be its
-- redelivery. A constant default keeps this ALTER a catalogue change.
ALTER TABLE dead_messages ADD COLUMN ingest_returns integer NOT NULL DEFAULT -1;

-- +goose Down
ALTER TABLE dead_messages DROP COLUMN ingest_returns;
