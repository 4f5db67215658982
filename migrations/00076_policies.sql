-- +goose Up

-- Automatic replay policies (docs/REPLAY.md "Automatic replay policies"),
-- run by the cron job "policies". A message a policy has tried as often as
-- it may and that died again stays pending, flagged: parked for a human.
-- No policy replays it again.
ALTER TABLE dead_messages ADD COLUMN auto_exhausted boolean NOT NULL DEFAULT false;
-- Parked messages per queue, for the alert rule auto_exhausted.
CREATE INDEX dead_messages_auto_exhausted ON dead_messages (source_queue)
    WHERE auto_exhausted AND status = 'pending';

-- How often each policy has tried each message: one row per (policy,
-- message), written with the attempt's replay task in the same
-- transaction under the job's lease, so an attempt happens once however
-- many instances run the job.
CREATE TABLE policy_attempts (
    policy          text        NOT NULL,
    message_id      bigint      NOT NULL,
    attempts        integer     NOT NULL,
    -- The replay task of the latest attempt, and when it was made.
    last_task_id    bigint      NOT NULL,
    last_attempt_at timestamptz NOT NULL,
    PRIMARY KEY (policy, message_id)
);
CREATE INDEX policy_attempts_message ON policy_attempts (message_id);

-- What each policy is doing: paused (by an operator, or by itself when its
-- canary died again), the last of its tasks it has looked at, and its
-- latest dry run. Policies themselves live in the configuration.
CREATE TABLE policy_state (
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
DROP TABLE policy_state;
DROP TABLE policy_attempts;
DROP INDEX dead_messages_auto_exhausted;
ALTER TABLE dead_messages DROP COLUMN auto_exhausted;
