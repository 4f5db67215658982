-- +goose Up

-- Who did what (docs/REPLAY.md "Approval"): an action that ran on a
-- second principal's approval names both people. The task and the audit
-- row of the action keep its requester as their actor (created_by,
-- actor) and name the approver here; approval_id links a task to the
-- request it carried out. Nullable columns without a default rewrite no
-- row and take their lock for an instant.
ALTER TABLE replay_tasks ADD COLUMN approved_by text;
ALTER TABLE replay_tasks ADD COLUMN approval_id bigint;
ALTER TABLE audit_log ADD COLUMN approved_by text;

-- A requester may withdraw a request that waits for a decision. The
-- approvals table holds requests, not messages: checking its few rows
-- against the new constraint is instant.
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'withdrawn')) NOT VALID;
ALTER TABLE approvals VALIDATE CONSTRAINT approvals_status_check;

-- +goose Down
UPDATE approvals SET status = 'rejected' WHERE status = 'withdrawn';
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'rejected', 'expired'));
ALTER TABLE audit_log DROP COLUMN approved_by;
ALTER TABLE replay_tasks DROP COLUMN approval_id;
ALTER TABLE replay_tasks DROP COLUMN approved_by;
