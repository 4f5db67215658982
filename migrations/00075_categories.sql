-- +goose NO TRANSACTION
-- +goose Up

-- NO TRANSACTION, so that each ALTER TABLE holds its table alone: in one
-- transaction, dead_messages would stay locked while the second ALTER
-- waited for failure_groups, which ingest writes in every batch. Each
-- statement is written to run again after an attempt that stopped half
-- way (rewritten so before the first release).

-- Failure categories (package category, docs/REPLAY.md "Failure
-- categories"): transient, permanent or unknown, computed by the consumer
-- at ingest from ordered rules. A default, not a rewrite: every existing
-- row reads 'unknown' at once (PostgreSQL keeps the default in the
-- catalogue), and so does every row an older dlq stores during a rolling
-- upgrade; the backfill "older_rows" (cron job "backfills") computes the
-- category of each row no ingest of this version wrote (x_death NULL,
-- 00070), and the cron job "categories" recomputes the others after any
-- change of the rules.
ALTER TABLE dead_messages ADD COLUMN IF NOT EXISTS category text NOT NULL DEFAULT 'unknown';

-- The category is part of a failure group's key (store.groupID), so each
-- group has one, and counts by category are the groups' counters summed:
-- no new counter table for ingest, replay and cleanup to keep in step.
-- Groups of unknown messages keep the ids they had before categories.
ALTER TABLE failure_groups ADD COLUMN IF NOT EXISTS category text NOT NULL DEFAULT 'unknown';

-- The recategorisation pass, shared by whichever instance runs the job
-- (written only under its lease). One row.
CREATE TABLE IF NOT EXISTS category_state (
    id              boolean     PRIMARY KEY DEFAULT true CHECK (id),
    -- The rules (category.Rules.Hash) every stored row was computed with,
    -- once a pass with them completed; NULL before the first.
    rules_hash      text,
    completed_at    timestamptz,
    -- The pass in progress: for which rules, over which ids (up to max_id:
    -- later rows were categorised at ingest), how far, and what it did.
    pass_hash       text,
    pass_started_at timestamptz,
    pass_cursor     bigint      NOT NULL DEFAULT 0,
    pass_max_id     bigint      NOT NULL DEFAULT 0,
    pass_scanned    bigint      NOT NULL DEFAULT 0,
    pass_changed    bigint      NOT NULL DEFAULT 0
);
INSERT INTO category_state (id) VALUES (true) ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE IF EXISTS category_state;
ALTER TABLE failure_groups DROP COLUMN IF EXISTS category;
ALTER TABLE dead_messages DROP COLUMN IF EXISTS category;
