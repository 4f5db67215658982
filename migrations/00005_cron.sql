-- +goose Up

-- One row per cron job. The instance named in holder runs the job while
-- expires_at is in the future; token grows by one every time the lease
-- changes hands, and every write a job
-- makes first checks (FOR SHARE) that its token is still the current one.
-- A paused or partitioned former holder therefore cannot write once another
-- instance has taken the job: its token no longer matches.
CREATE TABLE job_leases (
    job         text        PRIMARY KEY,
    holder      text        NOT NULL,
    token       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

-- One row per run: (job, tick) is unique, so two instances can never both
-- run the same scheduled time slot of a job.
CREATE TABLE job_runs (
    id            bigserial   PRIMARY KEY,
    job           text        NOT NULL,
    tick          timestamptz NOT NULL,
    instance      text        NOT NULL,
    token         bigint      NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    outcome       text        NOT NULL DEFAULT 'running'
        CHECK (outcome IN ('running', 'success', 'failure', 'lease_lost')),
    rows_affected bigint      NOT NULL DEFAULT 0,
    error         text,
    UNIQUE (job, tick)
);
CREATE INDEX job_runs_started_at ON job_runs (started_at);
CREATE INDEX job_runs_last_success ON job_runs (job, finished_at) WHERE outcome = 'success';

-- Progress of the summary reconciliation, shared by whichever instance runs
-- the summary job. One row.
CREATE TABLE summary_state (
    id              boolean     PRIMARY KEY DEFAULT true CHECK (id),
    -- Set when the first full reconciliation pass has finished: from then on
    -- queue_summary is known to match dead_messages.
    bootstrapped_at timestamptz,
    -- The pass in progress: when it started and the last source queue done.
    pass_started_at timestamptz,
    pass_cursor     text,
    -- When the last full pass finished.
    last_pass_at    timestamptz,
    -- Summary entries corrected since the table was created.
    repairs         bigint      NOT NULL DEFAULT 0
);
INSERT INTO summary_state (id) VALUES (true);

-- The alert state machine's state between evaluations (one JSON document),
-- written only under the alerts job's lease.
CREATE TABLE alert_state (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),
    state      jsonb       NOT NULL,
    holder     text        NOT NULL,
    token      bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Oldest pending message per source queue (min(failed_at)), and arrivals in
-- the last minutes, in one index probe per queue. Partial: resolved rows,
-- usually the bulk of the table, are not in it.
CREATE INDEX dead_messages_pending_failed_at ON dead_messages (source_queue, failed_at)
    WHERE status = 'pending';
-- Repeat failures: pending messages replayed more than twice. The literal 2
-- must match the queries in store/summary.go (a parameter would not let the
-- planner use this index).
CREATE INDEX dead_messages_repeat_failures ON dead_messages (source_queue)
    WHERE status = 'pending' AND replay_count > 2;
-- Retention and eviction of resolved messages, oldest resolution first.
CREATE INDEX dead_messages_replayed_at ON dead_messages (replayed_at)
    WHERE status = 'replayed';
CREATE INDEX dead_messages_acknowledged_at ON dead_messages (acknowledged_at)
    WHERE status = 'acknowledged';

-- +goose Down
DROP INDEX dead_messages_acknowledged_at;
DROP INDEX dead_messages_replayed_at;
DROP INDEX dead_messages_repeat_failures;
DROP INDEX dead_messages_pending_failed_at;
DROP TABLE alert_state;
DROP TABLE summary_state;
DROP TABLE job_runs;
DROP TABLE job_leases;
