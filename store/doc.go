// Package store is dlq's PostgreSQL layer: every query the program runs lives
// here, behind methods named for what they do.
//
// # Ingest
//
// IngestBatch writes one batch of dead messages in one transaction. The
// consumer acknowledges the batch's deliveries only after that transaction
// commits, so a crash anywhere loses nothing; the price is that a crash
// between commit and acknowledgement makes RabbitMQ deliver the same
// messages again. Exactly-once storage therefore rests on three rules, each
// with its own test:
//
//   - A delivery the broker marks as a first delivery (redelivered=false) has
//     never been seen by any consumer, so it always becomes a new row. Two
//     different dead messages are never merged, even with identical bytes and
//     no message-id.
//   - A redelivered message may already be stored. Every batch is registered
//     in ingest_inflight in the same transaction as its rows and stays there
//     until the consumer knows its acknowledgement reached the broker. A
//     redelivery is matched by content fingerprint only against rows of those
//     unconfirmed batches. A matched row moves to the current batch, so it stands
//     for this delivery until this batch's acknowledgement is confirmed in
//     turn, and absorbs one delivery per batch. A match is a duplicate: it is
//     counted and changes nothing else.
//   - A message carrying x-dlq-id is a replayed message that died again. It
//     returns to its own row (status pending, death details updated,
//     replay_count kept). Its x-dlq-replay-id is unique per publish and is
//     remembered on the row, so a redelivery of the same death changes
//     nothing.
//
// The batch id is chosen by the caller before the transaction, so when a
// commit's outcome is unknown (the connection died during COMMIT) a retry can
// ask whether the batch is already there instead of writing it twice.
//
// # Summary
//
// queue_summary holds per source queue and status counts. Every statement
// that inserts a row or changes a status adjusts it in the same transaction,
// so reading status is O(number of queues) whatever the table size.
//
// Two more counter tables follow the same rule: failure_groups (per failure
// group and status, see groups.go) and queue_activity (per queue and hour:
// new, returned, replayed, acknowledged, deleted; stats' "last 24 hours").
// Ingest updates all three in its batch. Any other statement that changes
// the status of rows or deletes them calls applyStatusDeltas (deltas.go) in
// the same transaction with what it changed, as []StatusMove{queue, group,
// from, to, messages, bytes}; the easiest way to get them is a statement
// that returns exactly those columns (see act in actions.go, read with
// statusMovesSQL). Lock order, everywhere: dead_messages rows, then
// queue_summary, queue_activity and failure_groups rows, each in key order.
//
// # Failure groups
//
// A message's group is a hash of source queue, reason, failure type and the
// failure message with its variable parts masked (NormalizeFailure), so it
// is computed in Go during ingest and written by the same COPY, without a
// lookup. Rows stored before migration 00004 have no group.
//
// # Listing and search
//
// Listings are keysets on id, newest first: each page is a range scan of
// the (status, id), (source_queue, status, id) or (group_id, status, id)
// index, the same cost at any depth. q combines exact search keys written
// at ingest (GIN), failure groups for failure text, and a bounded scan of
// one queue for bodies (search.go); ListMessages runs each part as its own
// newest-first query (searchIDs).
//
// # Text columns
//
// PostgreSQL text cannot hold NUL or invalid UTF-8. The exact bytes of every
// header and property live in the typed JSON columns; the plain text columns
// used for filtering (queue names, message id, failure text) are cleaned with
// cleanText so that one odd message can never make a batch fail forever.
package store
