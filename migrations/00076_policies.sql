-- +goose NO TRANSACTION
-- +goose Up

-- NO TRANSACTION: the index of parked messages is built CONCURRENTLY
-- (below). Each statement runs again safely after an attempt that
-- stopped half way (rewritten so before the first release: the index
-- was built with a SHARE lock that stopped ingest while it read the
-- table).

-- Automatic replay policies (docs/REPLAY.md "Automatic replay policies"),
-- run by the cron job "policies". A message a policy has tried as often as
-- it may and that died again stays pending, flagged: parked for a human.
-- No policy replays it again. A constant default changes the catalogue
-- only.
ALTER TABLE dead_messages ADD COLUMN IF NOT EXISTS auto_exhausted boolean NOT NULL DEFAULT false;
-- Parked messages per queue, for the alert rule auto_exhausted: no row is
-- parked yet, but building the index reads the whole table, so it is
-- built as 00072 builds its index (an invalid leftover dropped first; at
-- once on an empty table; CONCURRENTLY, without lock_timeout, otherwise).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('dead_messages_auto_exhausted') AND NOT indisvalid) THEN
        DROP INDEX dead_messages_auto_exhausted;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM dead_messages LIMIT 1) THEN
        CREATE INDEX IF NOT EXISTS dead_messages_auto_exhausted ON dead_messages (source_queue)
            WHERE auto_exhausted AND status = 'pending';
    END IF;
END
$$;
-- +goose StatementEnd
SET lock_timeout = 0;
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_messages_auto_exhausted ON dead_messages (source_queue)
    WHERE auto_exhausted AND status = 'pending';
RESET lock_timeout;

-- How often each policy has tried each message: one row per (policy,
-- message), written with the attempt's replay task in the same
-- transaction under the job's lease, so an attempt happens once however
-- many instances run the job.
CREATE TABLE IF NOT EXISTS policy_attempts (
    policy          text        NOT NULL,
    message_id      bigint      NOT NULL,
    attempts        integer     NOT NULL,
    -- The replay task of the latest attempt, and when it was made.
    last_task_id    bigint      NOT NULL,
    last_attempt_at timestamptz NOT NULL,
    PRIMARY KEY (policy, message_id)
);
CREATE INDEX IF NOT EXISTS policy_attempts_message ON policy_attempts (message_id);

-- What each policy is doing: paused (by an operator, or by itself when its
-- canary died again), the last of its tasks it has looked at, and its
-- latest dry run. Policies themselves live in the configuration.
CREATE TABLE IF NOT EXISTS policy_state (
    name            text        PRIMARY KEY,
    paused          boolean     NOT NULL DEFAULT false,
    paused_at       timestamptz,
    paused_by       text,
    paused_reason   text,
    checked_task_id bigint      NOT NULL DEFAULT 0,
    last_run_at     timestamptz,
    last_dry_run    jsonb
);

-- +goose Down
DROP TABLE IF EXISTS policy_state;
DROP TABLE IF EXISTS policy_attempts;
DROP INDEX CONCURRENTLY IF EXISTS dead_messages_auto_exhausted;
ALTER TABLE dead_messages DROP COLUMN IF EXISTS auto_exhausted;
