-- +goose Up

-- A replay rewrites each of its rows twice: pending -> replaying when it
-- is claimed, replaying -> replayed when its confirm is recorded. Neither
-- rewrite can stay on its page (the status is indexed, and a page of
-- 1.4 KB rows has no room), so each inserts a new entry into every index
-- whose predicate the new version matches, and that index maintenance is
-- most of PostgreSQL's work per replayed message (docs/BENCHMARKS.md,
-- Replay).
--
-- A row is replaying for the few seconds between its claim and its
-- settlement, and only a handful of them exist at any time (the replay
-- window of each running task). The listing and search indexes leave
-- those rows out, so a claim's rewrite no longer enters them; the
-- partial index on replaying rows (dead_messages_claim_owner, 00013)
-- serves the few queries that want them.
--
-- For the planner to use one of these indexes, a query must prove the
-- index's predicate from its own text: the store writes statuses into its
-- SQL as literals (never as parameters) and reads replaying rows in a
-- separate branch (store/filter.go, store/messages.go). The B-trees name
-- the other statuses and the GIN index says <> 'replaying', on purpose:
-- a search that only says status <> 'replaying' (to probe the GIN index)
-- must not make a B-tree with the same predicate look like a cheap
-- stand-in for the table, which the planner would read whole. A new
-- status must be added to these lists.
--
-- On a large table this rebuilds five indexes under an exclusive lock
-- (docs/OPERATIONS.md, Upgrading).
DROP INDEX dead_messages_status_id;
CREATE INDEX dead_messages_status_id ON dead_messages (status, id)
    WHERE status IN ('pending', 'replayed', 'acknowledged');
DROP INDEX dead_messages_queue_status_id;
CREATE INDEX dead_messages_queue_status_id ON dead_messages (source_queue, status, id)
    WHERE status IN ('pending', 'replayed', 'acknowledged');
DROP INDEX dead_messages_group_status_id;
CREATE INDEX dead_messages_group_status_id ON dead_messages (group_id, status, id)
    WHERE status IN ('pending', 'replayed', 'acknowledged');
DROP INDEX dead_messages_queue_status_failed_at;
CREATE INDEX dead_messages_queue_status_failed_at ON dead_messages (source_queue, status, failed_at)
    WHERE status IN ('pending', 'replayed', 'acknowledged');
DROP INDEX dead_messages_search;
CREATE INDEX dead_messages_search ON dead_messages USING gin (search_hashes)
    WHERE status <> 'replaying';

-- +goose Down
DROP INDEX dead_messages_search;
CREATE INDEX dead_messages_search ON dead_messages USING gin (search_hashes);
DROP INDEX dead_messages_queue_status_failed_at;
CREATE INDEX dead_messages_queue_status_failed_at ON dead_messages (source_queue, status, failed_at);
DROP INDEX dead_messages_group_status_id;
CREATE INDEX dead_messages_group_status_id ON dead_messages (group_id, status, id);
DROP INDEX dead_messages_queue_status_id;
CREATE INDEX dead_messages_queue_status_id ON dead_messages (source_queue, status, id);
DROP INDEX dead_messages_status_id;
CREATE INDEX dead_messages_status_id ON dead_messages (status, id);
