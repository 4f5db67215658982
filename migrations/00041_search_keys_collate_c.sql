-- +goose Up

-- The GIN index of search keys orders its entries with the column's
-- collation, so every key a message brings was compared through the
-- locale (strcoll) as it entered the index. At ingest the search indexes
-- cost PostgreSQL 26-31 us of CPU per message (everything else 38-40 us),
-- nearly all of it this index. Keys are lower-cased values matched exactly
-- (@>), never sorted for display: the byte order of "C" is all they need,
-- and equality is the same under both. Measured (docs/BENCHMARKS.md, API):
-- the search indexes' CPU per message drops by about a quarter and ingest
-- with them runs about a fifth faster. Queries need no change: the
-- column's collation wins over their parameters' default one, so they keep
-- matching the index.
--
-- No row is rewritten (same type, same bytes), but the index is rebuilt
-- under an exclusive lock: on a large table (minutes at 10M rows) ingest
-- and the API wait for it.
ALTER TABLE dead_messages ALTER COLUMN search_keys TYPE text[] COLLATE "C";
-- Changing the column's type drops its statistics; searches plan with them.
ANALYZE dead_messages (search_keys);

-- +goose Down
ALTER TABLE dead_messages ALTER COLUMN search_keys TYPE text[] COLLATE "default";
ANALYZE dead_messages (search_keys);
