-- +goose Up

-- A replay task: what to replay, how fast, and how far it got. The set of
-- messages is fixed when the task is created (replay_task_items), so
-- messages that arrive later are never swept in. A task is worked by one
-- runner at a time: runner_owner holds it for a lease that the runner keeps
-- renewing; a runner that died loses it when runner_expires_at passes and
-- another instance resumes it.
CREATE TABLE replay_tasks (
    id                  bigserial   PRIMARY KEY,
    status              text        NOT NULL
        CHECK (status IN ('scheduled', 'running', 'canary_wait', 'completed', 'cancelled', 'failed', 'canary_failed')),
    -- The request as accepted, in its public JSON form.
    request             jsonb       NOT NULL,
    -- The caller's queue scope (NULL: every queue).
    scope               text[],
    -- NULL: each message goes back to its own source exchange and key.
    target_exchange     text,
    target_routing_key  text,
    rate_per_second     double precision NOT NULL DEFAULT 0,
    force               boolean     NOT NULL DEFAULT false,
    -- Canary: publish canary_count messages, wait canary_wait_seconds,
    -- stop if any died again. canary_ids are the ones published.
    canary_count        integer     NOT NULL DEFAULT 0,
    canary_wait_seconds integer     NOT NULL DEFAULT 0,
    canary_started_at   timestamptz,
    canary_until        timestamptz,
    canary_ids          bigint[]    NOT NULL DEFAULT '{}',
    canary_passed       boolean     NOT NULL DEFAULT false,
    -- Progress. Every item is counted exactly once in published, failed,
    -- skipped or unknown, in the transaction that settles it; claimed counts
    -- rows taken so far (minus the ones handed back unpublished).
    requested           bigint      NOT NULL DEFAULT 0,
    claimed             bigint      NOT NULL DEFAULT 0,
    published           bigint      NOT NULL DEFAULT 0,
    failed              bigint      NOT NULL DEFAULT 0,
    skipped             bigint      NOT NULL DEFAULT 0,
    unknown             bigint      NOT NULL DEFAULT 0,
    error               text,
    created_by          text        NOT NULL DEFAULT '',
    created_role        text        NOT NULL DEFAULT '',
    created_via         text        NOT NULL DEFAULT '',
    request_id          text        NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    start_at            timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    runner_owner        text,
    runner_expires_at   timestamptz
);
-- Runners look for unfinished tasks whose start time has come.
CREATE INDEX replay_tasks_active ON replay_tasks (start_at, id)
    WHERE status IN ('scheduled', 'running', 'canary_wait');
CREATE INDEX replay_tasks_created ON replay_tasks (created_at, id);

-- The snapshot of a task: one row per selected message, written once when
-- the task is created. outcome stays NULL until the message is settled for
-- this task (published, failed, unknown, skipped); it is written once, in
-- the same transaction as the counter it adds to. No foreign key to
-- dead_messages: a message deleted meanwhile is settled as skipped.
CREATE TABLE replay_task_items (
    task_id    bigint NOT NULL REFERENCES replay_tasks (id) ON DELETE CASCADE,
    message_id bigint NOT NULL,
    outcome    text   CHECK (outcome IN ('published', 'failed', 'unknown', 'skipped')),
    detail     text,
    PRIMARY KEY (task_id, message_id)
) WITH (fillfactor = 80); -- room for the one outcome update to stay on its page (HOT)

-- Control-queue commands already handled, so that a repeated command_id
-- returns the first answer and does nothing again. answer is NULL while the
-- command runs; reserved_until lets a redelivery take over a command whose
-- handler died before answering.
CREATE TABLE control_commands (
    command_id     text        PRIMARY KEY,
    command        text        NOT NULL,
    principal      text        NOT NULL,
    answer         text,
    reserved_until timestamptz NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    answered_at    timestamptz
);
CREATE INDEX control_commands_created ON control_commands (created_at);

-- +goose Down
DROP TABLE control_commands;
DROP TABLE replay_task_items;
DROP TABLE replay_tasks;
