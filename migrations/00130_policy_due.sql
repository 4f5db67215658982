-- +goose NO TRANSACTION
-- +goose Up

-- The pending messages a replay policy may still try, by failure group
-- and the time they last died (store/policies.go, dueSQL). No attempt of
-- any policy is due sooner than first_delay × (1 − jitter) after the
-- message last died, so the policies job reads each selected group's
-- entries up to that time, the longest dead first, and stops once it has
-- the messages of its attempt: it no longer reads every pending message
-- of the group at each run (200,000 rows a minute for a group that size,
-- most of them just arrived or parked). Parked messages (auto_exhausted)
-- leave the index. The entry holds the id, so the walk reads no row but
-- the ones it takes or checks against their attempts.
--
-- Every message enters it when it is stored or dies again (one B-tree
-- entry, about 110 bytes of WAL: docs/UPGRADING.md). The build reads the
-- whole table: built as 00072 builds its index (an invalid leftover
-- dropped first; at once on an empty table; CONCURRENTLY, without
-- lock_timeout, otherwise). Each statement runs again safely after an
-- attempt that stopped half way. The version before this one neither
-- reads nor needs it.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('dead_messages_policy_due') AND NOT indisvalid) THEN
        DROP INDEX dead_messages_policy_due;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM dead_messages LIMIT 1) THEN
        CREATE INDEX IF NOT EXISTS dead_messages_policy_due ON dead_messages (group_id, failed_at, id)
            WHERE status = 'pending' AND NOT auto_exhausted;
    END IF;
END
$$;
-- +goose StatementEnd
SET lock_timeout = 0;
CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_messages_policy_due ON dead_messages (group_id, failed_at, id)
    WHERE status = 'pending' AND NOT auto_exhausted;
RESET lock_timeout;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS dead_messages_policy_due;
