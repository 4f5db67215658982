-- +goose Up

-- A task's items are written once, in the transaction that creates the
-- task, so the foreign key to replay_tasks checked nothing that could be
-- wrong; but it checked it for every item: 100,000 lookups of the task row
-- (FOR KEY SHARE), 253 of the 398 ms a 100,000-message snapshot took, while
-- the task waits to start (docs/BENCHMARKS.md, Replay). The items of a task
-- are now deleted with it by store.DeleteFinishedReplayTasksBefore, in the
-- same statement, instead of by ON DELETE CASCADE.
ALTER TABLE replay_task_items DROP CONSTRAINT IF EXISTS replay_task_items_task_id_fkey;

-- +goose Down
DELETE FROM replay_task_items i WHERE NOT EXISTS (SELECT 1 FROM replay_tasks t WHERE t.id = i.task_id);
ALTER TABLE replay_task_items ADD CONSTRAINT replay_task_items_task_id_fkey
    FOREIGN KEY (task_id) REFERENCES replay_tasks (id) ON DELETE CASCADE;
