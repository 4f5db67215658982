-- +goose NO TRANSACTION
-- +goose Up

-- NO TRANSACTION, so that each ALTER TABLE holds its table alone: in one
-- transaction, replay_tasks stayed locked while the next statement waited
-- for audit_log behind a long reader (a pg_dump, an audit export), and
-- replay claims stalled at each attempt (migrations/doc.go). Each
-- statement runs again safely after an attempt that stopped half way
-- (rewritten so after 0.1.0; the schema it leaves is the same).

-- Who did what (docs/REPLAY.md "Approval"): an action that ran on a
-- second principal's approval names both people. The task and the audit
-- row of the action keep its requester as their actor (created_by,
-- actor) and name the approver here; approval_id links a task to the
-- request it carried out. Nullable columns without a default rewrite no
-- row and take their lock for an instant.
ALTER TABLE replay_tasks ADD COLUMN IF NOT EXISTS approved_by text, ADD COLUMN IF NOT EXISTS approval_id bigint;
ALTER TABLE audit_log ADD COLUMN IF NOT EXISTS approved_by text;

-- A requester may withdraw a request that waits for a decision. The
-- approvals table holds requests, not messages: checking its few rows
-- against the new constraint is instant. Dropped and added in one
-- statement, so that no moment is without the check.
ALTER TABLE approvals DROP CONSTRAINT IF EXISTS approvals_status_check,
    ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'withdrawn')) NOT VALID;
ALTER TABLE approvals VALIDATE CONSTRAINT approvals_status_check;

-- +goose Down
UPDATE approvals SET status = 'rejected' WHERE status = 'withdrawn';
ALTER TABLE approvals DROP CONSTRAINT IF EXISTS approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending', 'approved', 'rejected', 'expired'));
ALTER TABLE audit_log DROP COLUMN IF EXISTS approved_by;
ALTER TABLE replay_tasks DROP COLUMN IF EXISTS approval_id, DROP COLUMN IF EXISTS approved_by;
