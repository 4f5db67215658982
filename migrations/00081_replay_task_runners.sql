-- +goose Up

-- Which dlq may run a replay task. During a rolling upgrade (docs/
-- UPGRADING.md) the runners of the earlier version take replay tasks as
-- well. Most tasks they run as this version would: by ids or a filter, at
-- a rate, with a canary. An edit-then-replay task (00074) they would run
-- wrongly: knowing nothing of its edit, they would publish the message as
-- stored, not the corrected copy. Their claim cannot be changed, so the
-- database refuses it: this version's runners count their acquisitions
-- (store.AcquireReplayTask), and an acquisition of an edit task that does
-- not is dropped (the trigger returns no row, so the earlier runner finds
-- no task this time and a runner of this version takes it at its next
-- poll). A later kind of task an earlier runner would misread is added to
-- the trigger's condition.
--
-- replay_tasks is small and written by replays only: one transaction.
ALTER TABLE replay_tasks ADD COLUMN acquisitions bigint NOT NULL DEFAULT 0;

-- +goose StatementBegin
CREATE FUNCTION dlq_replay_task_runner_too_old() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER replay_tasks_runner_too_old
    BEFORE UPDATE OF runner_owner ON replay_tasks
    FOR EACH ROW
    WHEN (NEW.edit IS NOT NULL AND NEW.runner_owner IS NOT NULL
          AND NEW.runner_owner IS DISTINCT FROM OLD.runner_owner
          AND NEW.acquisitions = OLD.acquisitions)
    EXECUTE FUNCTION dlq_replay_task_runner_too_old();

-- +goose Down
DROP TRIGGER replay_tasks_runner_too_old ON replay_tasks;
DROP FUNCTION dlq_replay_task_runner_too_old();
ALTER TABLE replay_tasks DROP COLUMN acquisitions;
