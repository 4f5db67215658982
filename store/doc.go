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
//     until the consumer knows its acknowledgement reached the broker (and
//     a few seconds more, package consumer). A
//     redelivery is matched by content fingerprint only against rows of those
//     unconfirmed batches. A matched row moves to the current batch, so it stands
//     for this delivery until this batch's acknowledgement is confirmed in
//     turn, and absorbs one delivery per batch. A match is a duplicate: it is
//     counted and changes nothing else. Identical twins share a fingerprint,
//     so a match also needs a single candidate row stored from a delivery
//     returned fewer times than this one (ingest_returns); otherwise the
//     delivery is stored: an extra row, never a lost twin.
//   - A message carrying x-dlq-id is a replayed message that died again. It
//     returns to its own row (status pending, death details updated,
//     replay_count kept); the death it replaces is appended to the row's
//     death_history (oldest first, at most DeathHistoryMax). Its
//     x-dlq-replay-id is unique per publish and is remembered on the row, so
//     a redelivery of the same death changes nothing.
//
// The batch id is chosen by the caller before the transaction, so when a
// commit's outcome is unknown (the connection died during COMMIT) a retry can
// ask whether the batch is already there instead of writing it twice.
//
// # Stale ingest batches
//
// A batch leaves ingest_inflight when its writer knows the acknowledgement
// reached the broker. A batch whose writer never learns it stays: the
// process was killed, its channel died, or it stopped (the batches
// acknowledged at the end of a session are kept on purpose, see package
// consumer). Such rows would widen the set redeliveries are matched against
// forever, so the cleanup job deletes them (DeleteStaleInflight) — but a
// row may go only when no delivery of its batch can come back any more:
// a delivery that comes back redelivered after its row went would be
// stored a second time. Deliveries come back when their channel closes
// unacknowledged (or with settlements RabbitMQ had not applied yet): the
// queue returns them and delivers them again, first in line, to a live
// consumer, which matches them and moves the matched rows to its own
// batch. The rule, with T = cleanup.ingest_inflight_ttl (default 1h):
//
//  1. the row was committed more than T ago. A live channel acknowledges a
//     batch within its commit round trip, so a batch that old was
//     acknowledged (only the confirmation was lost) or belongs to a channel
//     that is gone — unless that channel has been unable to send anything
//     for nearly T. T must be much longer than any such stall S (a
//     connection blocked by a broker alarm); the channel then closed, and
//     RabbitMQ returned its deliveries, at the latest S after the commit,
//     that is at least T−S ago;
//  2. its consumer is not one of the deleting process's consumers: that
//     process cannot tell its own live channel's batches from those of its
//     earlier, dead channels (they share the consumer tag), so it leaves
//     them all to whichever instance cleans up after it has gone;
//  3. the deleting process's ingest has worked without interruption (every
//     consumer subscribed, every write succeeding) for at least T. Then
//     whatever RabbitMQ returned when the batch's channel closed (by 1, at
//     least T−S ago) has been offered to working consumers for at least
//     T−S: returned messages are delivered before any other, within
//     moments, so they have been matched. Without this, rows would go
//     while RabbitMQ is unreachable (the returned messages wait in the
//     broker, or in a dead consumer's channel) or right after all of dlq
//     restarts following a long outage, before the returns are delivered.
//
// What the rule does not cover, stated: a redelivery that another instance
// holds unwritten for longer than T (it cannot write to PostgreSQL while
// this instance can) may find its row gone and be stored a second time.
// Removing a row never loses anything: the worst a wrong removal does is
// one duplicate row.
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
// statusMovesSQL). Their rows are locked after the rows and tasks the
// transaction writes ("Lock order").
//
// # Lock order
//
// A transaction that locks rows of several of these tables takes them in
// this order, and each table's rows in key order, so that no two
// transactions each hold what the other waits for (PostgreSQL would abort
// one of them with deadlock_detected, 40P01, after deadlock_timeout):
//
//  1. dead_messages rows, in id order, or passed over (SKIP LOCKED);
//  2. replay_task_items;
//  3. replay_tasks rows, in id order (lockReplayTasksSQL, in a transaction
//     that writes several);
//  4. the counters: queue_summary, queue_activity, then failure_groups
//     (applyStatusDeltas, ingest's batch);
//  5. replay_claims, the write-ahead marks a settlement or claim recovery
//     drops (a claim inserts its own new mark before its counters: no one
//     else can hold that row).
//
// A transaction may leave steps out but never goes back to an earlier
// one. Claims, settlements, claim recovery and the settling of a stopped
// task's retries (replay_claims.go, replay_settle.go, replay_recover.go)
// take what they lock in this order; ingest takes rows (those its
// replayed copies return to all at once, in id order, before it works
// through its batch in arrival order: lockReturnRows), the tasks whose
// claims lost returned rows, and the counters; rekey takes replay_tasks,
// then failure_groups (rekey_rest.go). Writes of one task's row alone
// (lease, renewal, status) hold nothing else, nor do the statements that
// write replay_claims rows alone: a claim's renewal and write-ahead marks,
// and the revoke of lapsed claims that claim recovery commits before it
// takes their rows (revokeLapsedClaims, which passes over claims others
// hold: a renewal and recovery take turns on the claim's row, yet
// recovery's own transaction still takes replay_claims last). One
// exception remains: the
// retention cleanup deletes replay tasks before their last items
// (DeleteFinishedReplayTasksBefore), which only touches tasks finished
// before the cutoff, whose items nothing writes any more.
//
// # Failure groups
//
// A message's group is a hash of source queue, reason, failure type, the
// failure message with its variable parts masked (NormalizeFailure) and
// the failure category (unknown adds nothing, so groups from before
// categories keep their ids), so it is computed in Go during ingest and
// written by the same COPY, without a lookup. Rows stored before migration
// 00004 have no group. Because the category is part of the key, counts by
// category are sums of groups (Stats, PendingByCategory); a change of the
// category rules moves rows between groups (RecategorizeBatch), with the
// counters, like any status change.
//
// # Automatic replay policies
//
// policies.go picks the messages whose next attempt by a policy is due
// (walking the policy's failure groups), and records an attempt — its
// replay task, the task's items and the attempt counts (policy_attempts)
// — in one transaction under the policies job's lease, so an attempt is
// made once whatever the number of instances.
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
// Those indexes leave out replaying rows (migration 00061): a replay
// rewrites each row at its claim and again at its settlement, and a claim
// that entered five more indexes made PostgreSQL the bottleneck of replay.
// So statuses are written into the SQL as literals (statusIn), which lets
// the planner prove status <> 'replaying' and use them; and when a filter
// wants replaying rows, they are read in a branch of their own through the
// claim index (dead_messages_claim_owner: a few per running task), with
// the whole of q checked on each.
//
// # Encryption at rest
//
// With Config.Encryption the store seals what it writes (seal.go: bodies,
// properties, headers, failure details, failure groups' text, waiting
// edits) under a data key per row bound to the row's id, and keeps keyed
// hashes instead of search keys, fingerprints and group ids; it never
// opens what it sealed (package ops and package replay do). rekey.go
// re-wraps data keys under the active key and checks at start that no
// key still wrapping data is missing. docs/SECURITY.md.
//
// # Text columns
//
// PostgreSQL text cannot hold NUL or invalid UTF-8. The exact bytes of every
// header and property live in the typed JSON columns; the plain text columns
// used for filtering (queue names, message id, failure text) are cleaned with
// cleanText so that one odd message can never make a batch fail forever.
package store
