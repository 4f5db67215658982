-- +goose Up

-- Four-eyes approval (ops, docs/REPLAY.md "Approval"): a bulk replay,
-- acknowledge or delete above approval_above becomes a request that a
-- second principal approves or rejects. The request keeps the ids its
-- selection matched when it was made (approval_items: the snapshot), so
-- that what is approved is exactly what was counted: messages that die
-- later are never swept in.
CREATE TABLE approvals (
    id             bigserial   PRIMARY KEY,
    action         text        NOT NULL CHECK (action IN ('replay', 'acknowledge', 'delete')),
    -- The request as accepted (its options: rate, target, canary ...), in
    -- its public JSON form.
    request        jsonb       NOT NULL,
    -- The requester's queue scope; NULL: every queue.
    scope          text[],
    count          bigint      NOT NULL,
    requested_by   text        NOT NULL,
    requested_role text        NOT NULL,
    requested_via  text        NOT NULL,
    request_id     text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    -- pending until decided; a pending request past expires_at is expired
    -- whether or not the cleanup job has written so yet.
    status         text        NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
    decided_by     text,
    decided_at     timestamptz,
    reason         text,
    -- What the approved action did (the replay task's id, the counts).
    result         jsonb
);
CREATE INDEX approvals_pending ON approvals (expires_at) WHERE status = 'pending';

CREATE TABLE approval_items (
    approval_id bigint NOT NULL REFERENCES approvals ON DELETE CASCADE,
    message_id  bigint NOT NULL,
    PRIMARY KEY (approval_id, message_id)
);

-- +goose Down
DROP TABLE approval_items;
DROP TABLE approvals;
