-- +goose Up

-- Body search (q with a source queue, store/search.go) reads the queue's
-- rows in the time range it is given. Without this index the planner
-- could only AND the failed_at BRIN index (a time range of every queue)
-- with every entry the queue has in (source_queue, status, id): at 10M
-- rows a phrase in the largest queue's last 24 hours took 2.5 s, most of
-- it reading that queue's 3M index entries. This index reads only the
-- range's entries of that queue (docs/BENCHMARKS.md, API). Partial
-- dead_messages_pending_failed_at covers pending messages only; searches
-- cover every status.
CREATE INDEX dead_messages_queue_failed_at ON dead_messages (source_queue, failed_at);

-- +goose Down
DROP INDEX dead_messages_queue_failed_at;
