-- +goose Up

-- Edit-then-replay (docs/REPLAY.md "Edit and replay"): an operator's
-- corrected copy of a message is published by a replay task of that one
-- message, whose edit (the new body, the header changes, the copy's
-- replay id) rides on the task: it is not part of the task's request, so
-- no task view shows a body.
ALTER TABLE replay_tasks ADD COLUMN edit jsonb;

-- One edit per message at a time: the row of the message's latest edit.
-- The edit's state is its task item's outcome: none yet (being edited),
-- published or unknown (edited: edit the copy once it is stored), failed
-- or skipped (nothing was sent: the message may be edited again).
CREATE TABLE message_edits (
    message_id     bigint      PRIMARY KEY,
    task_id        bigint      NOT NULL,
    copy_replay_id text        NOT NULL,
    edited_by      text        NOT NULL,
    edited_at      timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE message_edits;
ALTER TABLE replay_tasks DROP COLUMN edit;
