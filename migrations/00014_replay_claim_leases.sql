-- +goose Up

-- A claim's lease lives on its replay_claims row: renewing it is one small
-- update per claim instead of an update of every claimed message (each of
-- which rewrites the row and all its index entries, and would wait for the
-- locks of a settlement in progress). dead_messages.claim_expires_at keeps
-- the lease as first granted; a claim is expired when both have passed.
ALTER TABLE replay_claims ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now();

-- +goose Down
ALTER TABLE replay_claims DROP COLUMN expires_at;
