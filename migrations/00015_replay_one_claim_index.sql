-- +goose Up

-- Every claim rewrites its rows as replaying, and a row entering a partial
-- index WHERE status = 'replaying' costs an index insertion in the claim's
-- transaction. Two such indexes held the same rows; one is enough: lease
-- recovery reads the replaying rows (only the ones in flight, a few
-- thousand at most) through dead_messages_claim_owner and checks their
-- lease there.
DROP INDEX dead_messages_claims;

-- +goose Down
CREATE INDEX dead_messages_claims ON dead_messages (claim_expires_at) WHERE status = 'replaying';
