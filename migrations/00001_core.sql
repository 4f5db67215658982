-- +goose Up

-- One row per dead-lettering event. Bodies are stored exactly as received;
-- headers and properties as the typed JSON produced by broker.AppendHeadersJSON,
-- so the AMQP type of every value survives a replay.
CREATE TABLE dead_messages (
    id                  bigserial PRIMARY KEY,
    message_id          text,
    source_queue        text        NOT NULL DEFAULT '',
    source_exchange     text        NOT NULL DEFAULT '',
    source_routing_key  text        NOT NULL DEFAULT '',
    dead_letter_queue   text        NOT NULL,
    reason              text        NOT NULL,
    death_count         bigint      NOT NULL DEFAULT 0,
    failure             jsonb,
    failure_type        text,
    failure_message     text,
    properties          jsonb       NOT NULL,
    headers             jsonb       NOT NULL,
    body                bytea       NOT NULL,
    body_size           integer     NOT NULL,
    status              text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'replaying', 'replayed', 'acknowledged')),
    replay_count        integer     NOT NULL DEFAULT 0,
    first_failed_at     timestamptz NOT NULL,
    failed_at           timestamptz NOT NULL,
    replayed_at         timestamptz,
    acknowledged_at     timestamptz,
    status_changed_at   timestamptz NOT NULL DEFAULT now(),
    -- Redelivery matching: the content fingerprint and the ingest batch that
    -- wrote the row (see ingest_inflight).
    fingerprint         bigint      NOT NULL,
    ingest_batch        bigint,
    -- The x-dlq-replay-id of the replay whose death last updated this row, so
    -- a redelivery of that death is recognised and changes nothing.
    last_death_replay_id text,
    -- Set when the delivery could not be converted; the raw bytes are kept.
    conversion_error    text,
    -- Replay bookkeeping.
    last_replay_error   text,
    last_replay_at      timestamptz,
    claim_owner         text,
    claim_expires_at    timestamptz,
    replay_task_id      bigint
);

-- Listing newest first per status, and per queue and status (keyset on id).
CREATE INDEX dead_messages_status_id ON dead_messages (status, id);
CREATE INDEX dead_messages_queue_status_id ON dead_messages (source_queue, status, id);
-- Redelivery lookups only ever touch rows of in-flight batches.
CREATE INDEX dead_messages_ingest_batch ON dead_messages (ingest_batch) WHERE ingest_batch IS NOT NULL;
-- Lease recovery for replay claims.
CREATE INDEX dead_messages_claims ON dead_messages (claim_expires_at) WHERE status = 'replaying';

-- A batch is registered here in the same transaction that writes its rows, and
-- removed once its acknowledgement is known to have reached the broker. A
-- redelivered message is matched only against rows of batches still listed
-- here: those are the only rows whose ack may have been lost.
CREATE TABLE ingest_inflight (
    batch_id     bigint PRIMARY KEY,
    consumer     text        NOT NULL,
    rows         integer     NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);

-- Per source queue and status counts, updated in the transaction of every
-- change so status reads are O(number of queues).
CREATE TABLE queue_summary (
    source_queue text   NOT NULL,
    status       text   NOT NULL,
    messages     bigint NOT NULL DEFAULT 0,
    bytes        bigint NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_queue, status)
);

-- +goose Down
DROP TABLE queue_summary;
DROP TABLE ingest_inflight;
DROP TABLE dead_messages;
