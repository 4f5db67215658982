-- +goose Up

-- Failure groups: one row per (source queue, reason, failure type, normalised
-- failure message). The id is a hash computed by the writer (store.groupID),
-- so ingest can fill dead_messages.group_id without a round trip. Counters
-- by status are adjusted in the transaction of every insert, status change
-- and delete, like queue_summary.
CREATE TABLE failure_groups (
    id              bigint      PRIMARY KEY,
    source_queue    text        NOT NULL,
    reason          text        NOT NULL DEFAULT '',
    failure_type    text        NOT NULL DEFAULT '',
    pattern         text        NOT NULL DEFAULT '',
    -- One real message of the group, for display.
    sample_message  text        NOT NULL DEFAULT '',
    pending         bigint      NOT NULL DEFAULT 0,
    replaying       bigint      NOT NULL DEFAULT 0,
    replayed        bigint      NOT NULL DEFAULT 0,
    acknowledged    bigint      NOT NULL DEFAULT 0,
    first_seen      timestamptz NOT NULL,
    last_seen       timestamptz NOT NULL
);
CREATE INDEX failure_groups_queue ON failure_groups (source_queue);

-- Rows written before this migration belong to no group (NULL).
ALTER TABLE dead_messages ADD COLUMN group_id bigint;
CREATE INDEX dead_messages_group_status_id ON dead_messages (group_id, status, id);

-- Activity per source queue and hour, so "last 24 hours" in stats reads at
-- most 25 rows per queue instead of scanning the table by time.
CREATE TABLE queue_activity (
    source_queue text        NOT NULL,
    hour         timestamptz NOT NULL,
    new          bigint      NOT NULL DEFAULT 0,
    returned     bigint      NOT NULL DEFAULT 0,
    replayed     bigint      NOT NULL DEFAULT 0,
    acknowledged bigint      NOT NULL DEFAULT 0,
    deleted      bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (source_queue, hour)
);

-- Repeat failures (replayed, then dead again) are few; a partial index
-- makes counting and listing them cheap and costs nothing for other rows.
CREATE INDEX dead_messages_repeat ON dead_messages (source_queue, id)
    WHERE replay_count > 0 AND status = 'pending';

-- Search keys: the message id, the values of the application's headers
-- and the variable values of the failure message (ids, numbers, quoted
-- values), lower-cased, computed at ingest (store.SearchKeys). A GIN index
-- over a handful of keys per message is what ingest can afford: a
-- full-text or trigram index over the same text costs it several times
-- more (measured: docs/BENCHMARKS.md, API). Failure text is searched
-- through failure_groups; bodies by scanning within one source queue (see
-- store/search.go).
ALTER TABLE dead_messages ADD COLUMN search_keys text[];
CREATE INDEX dead_messages_search ON dead_messages USING gin (search_keys);
-- Body search within a time range reads the blocks of that range: rows
-- arrive in time order, so a BRIN index (a few pages, nearly free at
-- ingest) narrows a scan to them.
CREATE INDEX dead_messages_failed_at_brin ON dead_messages USING brin (failed_at);

-- +goose Down
DROP INDEX dead_messages_failed_at_brin;
DROP INDEX dead_messages_search;
ALTER TABLE dead_messages DROP COLUMN search_keys;
DROP INDEX dead_messages_repeat;
DROP TABLE queue_activity;
DROP INDEX dead_messages_group_status_id;
ALTER TABLE dead_messages DROP COLUMN group_id;
DROP TABLE failure_groups;
