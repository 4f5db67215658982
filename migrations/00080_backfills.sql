-- +goose NO TRANSACTION
-- +goose Up

-- Backfills (store/backfill.go, run by the cron job "backfills"): work
-- over existing rows that a migration must not do, since it would hold
-- its locks for as long as the work takes (docs/UPGRADING.md). A backfill
-- finds its rows itself (each knows what a row it has not done looks
-- like), works through them by id in batches under the job's lease, and
-- keeps its place and progress here, so that a pass survives restarts and
-- moves from instance to instance. Reads are right while it is unfinished:
-- they derive what it has not written yet.
--
-- NO TRANSACTION: the index below is built CONCURRENTLY. Each statement
-- runs again safely after an attempt that stopped half way.
CREATE TABLE IF NOT EXISTS backfills (
    name        text        PRIMARY KEY,
    -- The pass in progress: when it began, the last id done, how many
    -- rows it has done, and how many needed it when it began (an
    -- estimate: rows that need it later are found by the next pass).
    -- started_at is NULL when no pass is in progress.
    started_at  timestamptz,
    cursor      bigint      NOT NULL DEFAULT 0,
    done        bigint      NOT NULL DEFAULT 0,
    total       bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- When a pass last found nothing left to do, and how many rows the
    -- backfill has done in every pass so far.
    finished_at timestamptz,
    done_ever   bigint      NOT NULL DEFAULT 0
);

-- The rows of backfill "older_rows": rows no ingest of this version wrote
-- (x_death NULL, 00070): stored before the upgrade, or by an older dlq
-- still running during it. Every row of a database from before 00070 is
-- in it at first; it empties as the backfill writes their death records
-- and categories, and rows this version ingests never enter it. Built as
-- 00072 builds its index.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('dead_messages_older_rows') AND NOT indisvalid) THEN
        DROP INDEX dead_messages_older_rows;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM dead_messages LIMIT 1) THEN
        CREATE INDEX IF NOT EXISTS dead_messages_older_rows ON dead_messages (id) WHERE x_death IS NULL;
    END IF;
END
$$;
-- +goose StatementEnd
SET lock_timeout = 0;
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_messages_older_rows ON dead_messages (id) WHERE x_death IS NULL;
RESET lock_timeout;

-- A replayed message that dies again returns to its record: ingest
-- replaces the death (failed_at, reason, headers ...) and, in this
-- version, the death record and category with it. An older dlq running
-- during a rolling upgrade replaces the death but knows nothing of the
-- record, which would then describe the death before. This trigger
-- notices (the death changed, its record did not) and clears the record:
-- reads derive it from the new headers, and the backfill "older_rows"
-- writes it, with the category and failure group of the new death. It
-- costs this version's ingest nothing but the WHEN test on a return.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dlq_death_record_replaced() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.x_death := NULL;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE OR REPLACE TRIGGER dead_messages_death_record_replaced
    BEFORE UPDATE OF failed_at ON dead_messages
    FOR EACH ROW
    WHEN (NEW.failed_at IS DISTINCT FROM OLD.failed_at AND OLD.x_death IS NOT NULL
          AND NEW.x_death::text IS NOT DISTINCT FROM OLD.x_death::text)
    EXECUTE FUNCTION dlq_death_record_replaced();

-- +goose Down
DROP TRIGGER IF EXISTS dead_messages_death_record_replaced ON dead_messages;
DROP FUNCTION IF EXISTS dlq_death_record_replaced();
DROP INDEX CONCURRENTLY IF EXISTS dead_messages_older_rows;
DROP TABLE IF EXISTS backfills;
