-- +goose Up

-- x_death is the parsed x-death header as the API shows it (its x_death
-- field): the entries, most recent first, [] when there are none. Ingest
-- writes it from the header table it already decoded (consumer.Convert),
-- so a read no longer decodes the typed header JSON again. json, like
-- headers: written once, read whole, no parse into jsonb at ingest.
--
-- A nullable column without a default: adding it changes the catalogue
-- only (a moment of ACCESS EXCLUSIVE, waited for at most
-- store.MigrationLockTimeout). NULL is a row no ingest of this version
-- wrote: stored before this migration, by an older dlq still running
-- during a rolling upgrade, or by a tool's COPY. Reads derive the record
-- of such a row from its headers (dlq_x_death, below: the entries the API
-- derived until now, as the text encoding/json writes, for every header
-- JSON the codec writes; test: consumer/deathrecord_test.go), and the
-- backfill "older_rows" (store/backfill_older.go, run by the cron job
-- "backfills") writes it, with the row's failure category, in batches
-- while dlq runs. One difference from the API before, a fix: when a
-- header key is not valid UTF-8 (or holds NUL) the codec writes every key
-- in base64, and the API, reading x-death by its plain key, showed []; the
-- record has the entries, as ingest stores them now.
--
-- Rewritten before the first release: it filled the column of every row
-- here, in one UPDATE that held ACCESS EXCLUSIVE on dead_messages for as
-- long as it took (about 3 minutes per million rows on a loaded machine,
-- docs/UPGRADING.md), while ingest and the API waited.
ALTER TABLE dead_messages ADD COLUMN x_death json;

-- The JSON string encoding/json writes for text t: to_json's escapes are
-- the same except for <, >, &, U+2028 and U+2029, which Go escapes too.
-- +goose StatementBegin
CREATE FUNCTION dlq_json_string(t text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT replace(replace(replace(replace(replace(to_json(t)::text,
    '<', '\u003c'), '>', '\u003e'), '&', '\u0026'), chr(8232), '\u2028'), chr(8233), '\u2029')
$$;
-- +goose StatementEnd

-- The JSON string encoding/json writes for a Go string holding bytes b
-- (a header string the codec keeps in base64, or a byte array): valid
-- UTF-8 as it is, NUL as \u0000, each byte Go's UTF-8 decoder rejects as
-- \ufffd.
-- +goose StatementBegin
CREATE FUNCTION dlq_json_bytes(b bytea) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    out text := '';
    run text := ''; -- valid text not yet escaped
    n int := length(b);
    i int := 0;
    c int;
    need int;
    lo int;
    hi int;
    ok boolean;
BEGIN
    WHILE i < n LOOP
        c := get_byte(b, i);
        -- Lead byte: the sequence's length and its second byte's range
        -- (no overlong forms, no surrogates, nothing above U+10FFFF).
        need := -1;
        lo := 128;
        hi := 191;
        IF c BETWEEN 1 AND 127 THEN need := 0;
        ELSIF c BETWEEN 194 AND 223 THEN need := 1;
        ELSIF c = 224 THEN need := 2; lo := 160;
        ELSIF c BETWEEN 225 AND 236 OR c BETWEEN 238 AND 239 THEN need := 2;
        ELSIF c = 237 THEN need := 2; hi := 159;
        ELSIF c = 240 THEN need := 3; lo := 144;
        ELSIF c BETWEEN 241 AND 243 THEN need := 3;
        ELSIF c = 244 THEN need := 3; hi := 143;
        END IF;
        ok := need >= 0 AND i + need < n;
        IF ok AND need > 0 THEN
            ok := get_byte(b, i + 1) BETWEEN lo AND hi;
            FOR k IN 2..need LOOP
                ok := ok AND get_byte(b, i + k) BETWEEN 128 AND 191;
            END LOOP;
        END IF;
        IF ok THEN
            run := run || convert_from(substring(b FROM i + 1 FOR need + 1), 'UTF8');
            i := i + need + 1;
            CONTINUE;
        END IF;
        IF run <> '' THEN
            out := out || substring(dlq_json_string(run) FROM 2 FOR length(dlq_json_string(run)) - 2);
            run := '';
        END IF;
        out := out || CASE WHEN c = 0 THEN '\u0000' ELSE '\ufffd' END;
        i := i + 1;
    END LOOP;
    RETURN '"' || out || substring(dlq_json_string(run) FROM 2);
END
$$;
-- +goose StatementEnd

-- The helpers below that are single SQL expressions are inlined into the
-- query that calls them (an SQL function that is not would be planned
-- again on every call); what needs a loop or a subquery is PL/pgSQL, whose
-- plans are kept, and only the base64 forms a header rarely has reach it.

-- Whether header value v is one of the codec's {"type": …} wrappers rather
-- than a table (broker.isTypedObject).
-- +goose StatementBegin
CREATE FUNCTION dlq_header_typed(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN jsonb_typeof(v) = 'object'
    THEN v ? 'type' AND v - 'type' - 'value' - 'encoding' = '{}'::jsonb
    ELSE false END
$$;
-- +goose StatementEnd

-- Header value v read as text (broker.headerString), as a JSON string: a
-- string, a base64 string or, with bytes_too, a byte array. NULL when v is
-- none of those.
-- +goose StatementBegin
CREATE FUNCTION dlq_header_text(v jsonb, bytes_too boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE
    WHEN jsonb_typeof(v) = 'string' THEN dlq_json_string(v #>> '{}')
    WHEN NOT dlq_header_typed(v) OR jsonb_typeof(v -> 'value') <> 'string' THEN NULL
    WHEN v ->> 'type' = 'string' AND v ? 'encoding' THEN dlq_json_bytes(decode(v ->> 'value', 'base64'))
    WHEN v ->> 'type' = 'string' THEN dlq_json_string(v ->> 'value')
    WHEN v ->> 'type' = 'bytes' AND bytes_too THEN dlq_json_bytes(decode(v ->> 'value', 'base64'))
END
$$;
-- +goose StatementEnd

-- A JSON string s read as an integer the way broker.headerInt reads text:
-- strings.TrimSpace, then strconv.ParseInt; 0 when that fails.
-- +goose StatementBegin
CREATE FUNCTION dlq_text_int(s text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    IF strpos(s, '\u0000') > 0 THEN
        -- Text holding NUL (which no PostgreSQL text can): no number.
        RETURN 0;
    END IF;
    s := s::jsonb #>> '{}';
    s := regexp_replace(s, '^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$', '', 'g');
    IF s !~ '^[+-]?[0-9]+$' OR s::numeric NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
        RETURN 0;
    END IF;
    RETURN s::bigint;
END
$$;
-- +goose StatementEnd

-- Header value v read as an integer (broker.headerInt): an integer of any
-- AMQP width, or text holding a decimal int64 between spaces; else 0.
-- +goose StatementBegin
CREATE FUNCTION dlq_header_int(v jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE
    WHEN dlq_header_typed(v) AND v ->> 'type' IN ('int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32')
        THEN (v ->> 'value')::bigint
    ELSE coalesce(dlq_text_int(dlq_header_text(v, true)), 0)
END
$$;
-- +goose StatementEnd

-- dlq_header_time for every value but a timestamp as the codec writes it
-- in the years 0001 to 9999.
-- +goose StatementBegin
CREATE FUNCTION dlq_header_time_other(v jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    zero CONSTANT text := '"0001-01-01T00:00:00Z"';
    sec numeric;
BEGIN
    IF v IS NULL OR NOT dlq_header_typed(v) THEN
        RETURN zero;
    END IF;
    IF v ->> 'type' = 'timestamp' AND jsonb_typeof(v -> 'value') = 'string' THEN
        IF v ->> 'value' LIKE '0000-%' THEN
            RETURN zero;
        END IF;
        sec := extract(epoch FROM (v ->> 'value')::timestamptz);
    ELSIF v ->> 'type' IN ('timestamp', 'int64', 'int32', 'uint32') AND jsonb_typeof(v -> 'value') = 'number' THEN
        sec := (v ->> 'value')::numeric;
    ELSE
        RETURN zero;
    END IF;
    -- Years 1 to 9999, and not the zero time itself.
    IF sec <= -62135596800 OR sec > 253402300799 THEN
        RETURN zero;
    END IF;
    RETURN '"' || to_char(to_timestamp(floor(sec)::float8) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || '"';
END
$$;
-- +goose StatementEnd

-- Header value v read as a time (broker.headerTime), as the JSON string of
-- a Go time.Time in UTC: an AMQP timestamp, or Unix seconds in an int64,
-- int32 or uint32; the zero time outside the years 1 to 9999. The codec
-- writes a timestamp in those years as that very string.
-- +goose StatementBegin
CREATE FUNCTION dlq_header_time(v jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE
    WHEN dlq_header_typed(v) AND v ->> 'type' = 'timestamp'
        AND v ->> 'value' ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$'
        AND v ->> 'value' NOT LIKE '0000-%'
        THEN '"' || (v ->> 'value') || '"'
    ELSE dlq_header_time_other(v)
END
$$;
-- +goose StatementEnd

-- A table whose keys the codec wrote in base64, with the fields of an
-- x-death entry under their names.
-- +goose StatementBegin
CREATE FUNCTION dlq_death_entry_base64(v jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_object_agg(convert_from(decode(k, 'base64'), 'UTF8'), x), '{}')
        FROM jsonb_each(v) AS e(k, x)
        WHERE decode(k, 'base64') IN ('\x7175657565', '\x726561736f6e', '\x65786368616e6765',
            '\x726f7574696e672d6b657973', '\x636f756e74', '\x74696d65',
            '\x6f726967696e616c2d65787069726174696f6e'));
END
$$;
-- +goose StatementEnd

-- Header value v as a table with literal keys (the codec writes a table as
-- an object, wrapped when its keys need base64 or it looks like a typed
-- value); NULL when v is no table.
-- +goose StatementBegin
CREATE FUNCTION dlq_death_entry(v jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE
    WHEN jsonb_typeof(v) IS DISTINCT FROM 'object' THEN NULL
    WHEN NOT dlq_header_typed(v) THEN v
    WHEN v ->> 'type' <> 'table' OR jsonb_typeof(v -> 'value') <> 'object' THEN NULL
    WHEN NOT v ? 'encoding' THEN v -> 'value'
    ELSE dlq_death_entry_base64(v -> 'value')
END
$$;
-- +goose StatementEnd

-- The x-death value of headers whose keys the codec wrote in base64 (a
-- header key that is not valid UTF-8, or holds NUL); NULL for any other.
-- +goose StatementBegin
CREATE FUNCTION dlq_x_death_base64(headers json) RETURNS json
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF json_typeof(headers) = 'object' AND headers ->> 'type' = 'table' AND headers ->> 'encoding' = 'base64'
        AND json_typeof(headers -> 'value') = 'object'
        AND NOT EXISTS (SELECT 1 FROM json_object_keys(headers) k WHERE k NOT IN ('type', 'value', 'encoding')) THEN
        RETURN (SELECT x FROM json_each(headers -> 'value') AS e(k, x) WHERE decode(k, 'base64') = '\x782d6465617468' LIMIT 1);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The parsed x-death header of a row's headers, as consumer.Convert stores
-- it in x_death (broker.ExtractDeath's entries, written by encoding/json):
-- the table entries of the x-death array, most recent first, each field
-- read as broker.parseDeaths reads it (headerString, headerStrings,
-- headerInt, headerTime); [] when there are none. One row: a set-returning
-- SQL function, so that a query using it (SELECT x FROM
-- dlq_x_death_rows(headers) x) has it inlined and planned once, not per row.
-- +goose StatementBegin
CREATE FUNCTION dlq_x_death_rows(headers json) RETURNS SETOF json
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT coalesce('[' || string_agg('{"queue":' || coalesce(dlq_header_text(t -> 'queue', true), '""')
        || ',"reason":' || coalesce(dlq_header_text(t -> 'reason', true), '""')
        || ',"exchange":' || coalesce(dlq_header_text(t -> 'exchange', true), '""')
        || ',"routing_keys":' || CASE
            WHEN jsonb_typeof(t -> 'routing-keys') = 'array' THEN (
                SELECT '[' || coalesce(string_agg(s, ',' ORDER BY j), '') || ']'
                FROM jsonb_array_elements(t -> 'routing-keys') WITH ORDINALITY AS r(y, j),
                    LATERAL (SELECT dlq_header_text(y, true) AS s) q
                WHERE s IS NOT NULL)
            ELSE coalesce('[' || dlq_header_text(t -> 'routing-keys', false) || ']', '[]')
        END
        || ',"count":' || dlq_header_int(t -> 'count')
        || ',"time":' || dlq_header_time(t -> 'time')
        || coalesce(',"original_expiration":' || nullif(dlq_header_text(t -> 'original-expiration', true), '""'), '')
        || '}', ',' ORDER BY i) || ']', '[]')::json
FROM (SELECT coalesce(headers -> 'x-death', dlq_x_death_base64(headers)) AS xd OFFSET 0) h,
    jsonb_array_elements(CASE WHEN json_typeof(h.xd) = 'array' THEN h.xd::jsonb ELSE '[]' END) WITH ORDINALITY AS e(x, i),
    LATERAL (SELECT dlq_death_entry(x) AS t OFFSET 0) d
WHERE t IS NOT NULL
$$;
-- +goose StatementEnd

-- dlq_x_death_rows for one row's headers, [] for headers it cannot read
-- (the codec does not write such, and the API showed [] for them): reads
-- use it for rows that were stored without x_death.
-- +goose StatementBegin
CREATE FUNCTION dlq_x_death(headers json) RETURNS json
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT x FROM dlq_x_death_rows(headers) AS x);
EXCEPTION WHEN OTHERS THEN
    RETURN '[]';
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE dead_messages DROP COLUMN x_death;
DROP FUNCTION dlq_x_death(json);
DROP FUNCTION dlq_x_death_rows(json);
DROP FUNCTION dlq_x_death_base64(json);
DROP FUNCTION dlq_death_entry(jsonb);
DROP FUNCTION dlq_death_entry_base64(jsonb);
DROP FUNCTION dlq_header_time(jsonb);
DROP FUNCTION dlq_header_time_other(jsonb);
DROP FUNCTION dlq_header_int(jsonb);
DROP FUNCTION dlq_text_int(text);
DROP FUNCTION dlq_header_text(jsonb, boolean);
DROP FUNCTION dlq_header_typed(jsonb);
DROP FUNCTION dlq_json_bytes(bytea);
DROP FUNCTION dlq_json_string(text);
