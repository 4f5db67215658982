-- +goose NO TRANSACTION
-- +goose Up

-- Text search across every queue (store/search.go, docs/API.md "q"): words
-- of the failure type, failure message and stack, of the application's
-- header values and of the start of text bodies, through a GIN index over
-- a PostgreSQL full-text document (the 'simple' configuration: words
-- lower-cased, no stemming, no stop words, so a phrase matches as
-- written). docs/BENCHMARKS.md (History, text search) has the
-- measurements behind the choices below.
--
-- The document is an index expression, not a stored column: a tsvector
-- of a 1 KiB body is about as large as the body, and a row that grows
-- past 2 kB is toasted. The index rechecks a phrase by computing the
-- expression again on the candidate rows only.
--
-- Two columns, written by ingest (store.SearchText), say what of a row is
-- text, which SQL cannot tell cheaply (PostgreSQL 15 has no UTF-8 check
-- that answers instead of failing):
--   body_text_bytes  how many bytes at the start of the body are text to
--                    index: the body is valid UTF-8 without NUL and its
--                    content type is a text type; at most 1 KiB, cut at a
--                    character boundary. 0: nothing (binary). NULL: not
--                    looked at (a row stored before this migration: see
--                    docs/OPERATIONS.md, "Text search of older rows").
--   search_text      the application's header values (not RabbitMQ's
--                    death headers), NULL when there are none.
-- New nullable columns without a default: no row is rewritten.
--
-- Sealed rows (encryption at rest) are never indexed: their text is
-- sealed, and an index over it would keep it in plain text. The index
-- leaves out replaying rows, like the key index (00061).
--
-- NO TRANSACTION: each statement commits on its own (the Down drops an
-- index CONCURRENTLY); every statement can run again.
ALTER TABLE dead_messages
    ADD COLUMN IF NOT EXISTS body_text_bytes integer,
    ADD COLUMN IF NOT EXISTS search_text text;

-- The searchable document of a row. Punctuation becomes white space
-- first (the same as dlq_search_words), so that the parts of a class name, a path, an
-- address or "order-42" are words of their own: the parser would keep
-- com.shop.InvoiceMapper.map as one "host" token, and InvoiceMapper would
-- not find it. A query goes through dlq_search_words (store/textsearch.go;
-- TestSearchWordsMatchDocument holds the two expressions together). The
-- document calls only pg_catalog functions: an index expression is also
-- computed where the search path is not dlq's (autovacuum's ANALYZE,
-- pg_restore), and a call to a function of dlq's schema would fail there.
-- IMMUTABLE although convert_from is only STABLE (it depends on the
-- database's encoding, which never changes for a database): an index
-- expression must be immutable. body_text_bytes ends on a character
-- boundary of valid UTF-8, so convert_from never fails here.
CREATE OR REPLACE FUNCTION dlq_search_words(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN regexp_replace(t, '[-.:/@()\[\]{}=,;"''<>\\|#$&*+!?~`^%_]+', ' ', 'g');

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

-- No index here: 00079 moved the documents into message_text, whose GIN
-- index searches read. This migration once built an expression index
-- (dead_messages_text) that 00079 dropped again; a database that ran it
-- then ends the same once 00079 has run.

-- +goose Down
SET lock_timeout = 0;
DROP INDEX CONCURRENTLY IF EXISTS dead_messages_text;
RESET lock_timeout;
DROP FUNCTION IF EXISTS dlq_search_document(text, text, jsonb, text, bytea, integer);
DROP FUNCTION IF EXISTS dlq_search_words(text);
ALTER TABLE dead_messages DROP COLUMN IF EXISTS search_text, DROP COLUMN IF EXISTS body_text_bytes;
