-- +goose NO TRANSACTION
-- +goose Up

-- NO TRANSACTION, so that each ALTER TABLE holds its table alone (as in
-- 00100); each statement runs again safely after an attempt that stopped
-- half way.

-- Replays that finish through broker faults (docs/REPLAY.md, "Duplicates
-- and unknown outcomes"). A publish whose confirm never came (connection
-- lost, node lost, confirm timeout, the replaying process killed) is sent
-- again by its task, up to the task's unknown_retries times; 0 holds it as
-- before (on_unknown: hold, at most one copy), which is also what every
-- task created before this migration, or by an instance that predates it,
-- does. Constant defaults and nullable columns only: no table is
-- rewritten, and each ALTER holds its lock for an instant.
ALTER TABLE replay_tasks
    ADD COLUMN IF NOT EXISTS unknown_retries integer NOT NULL DEFAULT 0,
    -- Publishes the task sent again after an unknown outcome.
    ADD COLUMN IF NOT EXISTS republished bigint NOT NULL DEFAULT 0;

-- unknown_count: how many of the task's publishes of the message had an
-- unknown outcome (NULL: none). It fences the settlement of a publish (its
-- outcome is recorded only while the count is the one its claim read), so
-- a holder whose claim was taken back cannot settle the item under the
-- publish sent again. copy_replay_count: the x-dlq-replay-count those
-- copies carried. A copy that dies and comes back raises the row's
-- replay_count to it, and the task then does not send the message again.
-- Both stay NULL on every item that never had an unknown outcome, so the
-- items' size, and their HOT settlements, are unchanged.
ALTER TABLE replay_task_items
    ADD COLUMN IF NOT EXISTS unknown_count smallint,
    ADD COLUMN IF NOT EXISTS copy_replay_count bigint;

-- +goose Down
ALTER TABLE replay_task_items DROP COLUMN IF EXISTS copy_replay_count, DROP COLUMN IF EXISTS unknown_count;
ALTER TABLE replay_tasks DROP COLUMN IF EXISTS republished, DROP COLUMN IF EXISTS unknown_retries;
