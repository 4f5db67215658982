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

-- Text search over message id, failure type and message, and header values
-- (strings and numbers at any depth, stack traces left out) as one
-- full-text document ('simple' configuration: no stemming, no stop words,
-- so ids and codes stay whole). A tsvector GIN index holds a few dozen
-- words per message; a trigram index over the same text costs ingest
-- several times more (measured: docs/BENCHMARKS.md, API). Bodies are not
-- indexed: they are searched by scanning within one source queue (see
-- store/search.go).
CREATE FUNCTION dlq_search_doc(message_id text, failure_type text, failure_message text, headers jsonb)
RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN to_tsvector('simple'::regconfig, coalesce(message_id, '') || ' ' || coalesce(failure_type, '') || ' ' || coalesce(failure_message, ''))
    || jsonb_to_tsvector('simple'::regconfig,
        headers - ARRAY['x-exception-stacktrace', 'x-error-stack', 'x-error-stacktrace', 'x-exception-stack',
                        'NServiceBus.ExceptionInfo.StackTrace', 'MT-Fault-StackTrace'],
        '["string", "numeric"]');

-- The query for q: its words as a phrase, the last one as a prefix
-- ("declined by iss" finds "declined by issuer", "timeout" finds
-- "TimeoutError"). Any input is safe: phraseto_tsquery has no syntax.
CREATE FUNCTION dlq_search_query(q text)
RETURNS tsquery LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN numnode(phraseto_tsquery('simple'::regconfig, q)) = 0 THEN phraseto_tsquery('simple'::regconfig, q)
            ELSE (phraseto_tsquery('simple'::regconfig, q)::text || ':*')::tsquery END;

CREATE INDEX dead_messages_search ON dead_messages
    USING gin (dlq_search_doc(message_id, failure_type, failure_message, headers));

-- +goose Down
DROP INDEX dead_messages_search;
DROP FUNCTION dlq_search_query(text);
DROP FUNCTION dlq_search_doc(text, text, text, jsonb);
DROP INDEX dead_messages_repeat;
DROP TABLE queue_activity;
DROP INDEX dead_messages_group_status_id;
ALTER TABLE dead_messages DROP COLUMN group_id;
DROP TABLE failure_groups;
