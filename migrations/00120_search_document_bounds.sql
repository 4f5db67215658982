-- +goose Up

-- The searchable document reads at most 4,096 characters of the failure
-- message, as it always did of the stack, and 255 of the failure type.
-- Uncut, a failure message of a megabyte (an import of another tool's
-- export, a broker with a raised frame_max) made a tsvector over
-- PostgreSQL's 1 MB limit: the text indexer's batch failed at every
-- attempt, so no later message became searchable by its words, and every
-- search whose newest rows reached that one failed with it.
--
-- A function only: no table is locked, no row changes. Documents written
-- before keep their words; an instance of the version before this
-- migration calls the same function and gets the bounded document too.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dlq_search_document(failure_type text, failure_message text, failure jsonb,
    search_text text, body bytea, body_text_bytes integer) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('simple'::regconfig, regexp_replace(concat_ws(E'\n', left(failure_type, 255),
        left(failure_message, 4096), left(failure ->> 'stack', 4096), search_text,
        CASE WHEN body_text_bytes > 0 THEN convert_from(substring(body FROM 1 FOR body_text_bytes), 'UTF8') END),
        '[-.:/@()\[\]{}=,;"''<>\\|#$&*+!?~`^%_]+', ' ', 'g'))
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dlq_search_document(failure_type text, failure_message text, failure jsonb,
    search_text text, body bytea, body_text_bytes integer) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('simple'::regconfig, regexp_replace(concat_ws(E'\n', failure_type, failure_message,
        left(failure ->> 'stack', 4096), search_text,
        CASE WHEN body_text_bytes > 0 THEN convert_from(substring(body FROM 1 FOR body_text_bytes), 'UTF8') END),
        '[-.:/@()\[\]{}=,;"''<>\\|#$&*+!?~`^%_]+', ' ', 'g'))
$$;
-- +goose StatementEnd
