-- +goose Up

-- Write-ahead marks of replay claims. Before publishing the messages of a
-- claim (which go out in id order), the runner records that messages up to
-- through_id may be published. When the claim's holder dies, its rows above
-- the mark were certainly never published: they go back to the task as not
-- done yet, and only the rows at or below it are settled as unknown.
CREATE TABLE replay_claims (
    token      text        PRIMARY KEY,
    task_id    bigint      NOT NULL,
    through_id bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Renewals and recovery find the rows of a claim by its token.
CREATE INDEX dead_messages_claim_owner ON dead_messages (claim_owner) WHERE status = 'replaying';

-- +goose Down
DROP INDEX dead_messages_claim_owner;
DROP TABLE replay_claims;
