// Package replay sends stored dead messages back to RabbitMQ, safely: each
// message is published once per replay (again only when the outcome of a
// publish of it is unknown), with publisher confirms and the mandatory
// flag, at a chosen rate, after a chosen delay, with a canary, and
// cancellable. The control queue (package control) and the HTTP API
// start and cancel tasks through the operations layer (package ops).
//
// # Tasks and the snapshot
//
// A replay is a task (replay_tasks). Starting one records, in one
// transaction, the task, the ids of every selected message
// (replay_task_items: the snapshot) and the audit row. The set is fixed at
// that moment: a message that dies later is not swept in, even if it
// matches the filter, because operators replaying "everything from orders"
// mean what they saw. Every item is settled exactly once for its task —
// published, failed, unknown or skipped — in the same transaction that
// adds to the task's counter, so the counters are exact and a task knows
// what is left after any crash. A dry run runs the selection's count and
// sample only, and records nothing.
//
// # Runners and leases
//
// Every dlq serve instance runs a runner loop (Service.Run). A runner takes
// a due task that no live runner holds (SKIP LOCKED, so instances never
// wait for each other) and keeps it with a lease it renews every Lease/3.
// A runner that dies loses its task when the lease runs out and another
// instance resumes it; a runner shutting down hands its task back at once.
// A task runs on one runner at a time, which keeps its rate limit (a token
// bucket) exact.
//
// # Claims and fencing
//
// A runner claims a task's messages in batches: pending → replaying, with
// FOR UPDATE SKIP LOCKED on the message rows, each batch under its own
// token (dead_messages.claim_owner) and lease. Only one claimer can win a
// row; a row held by another task's claim is passed over and looked at
// again later; an item settled since it was selected is left alone (the
// claim checks the items in a statement that starts after its row locks
// were granted: whatever settles an item of a claimable message holds
// that message's row). A claim also clears the row's ingest batch once
// that batch has left ingest_inflight, so that the replay's two rewrites
// of the row stay out of the redelivery-matching index; a batch still in
// flight stays (package store, Ingest). An unthrottled task runs three
// claims at once, and every task three settlements, so that the publisher
// does not wait for the database.
//
// Every write that ends a claim says WHERE status = 'replaying' AND
// claim_owner = <token>: a holder whose claim was taken back cannot touch
// the row any more, and a replayed message that died and came back to its
// row before its confirm was recorded (the consumer sets it pending, with
// replay_count from x-dlq-replay-count) is left exactly as the consumer
// wrote it. A settlement takes no row lock before it updates: its update
// carries those conditions, so a row another transaction changed
// meanwhile is re-read once that change commits, and is settled only if it
// is still replaying under the same token. The holder also fences
// itself: once three quarters of the lease have passed since the claim or
// its last renewal, it publishes nothing more from the batch before
// asking the database again. A claim
// whose lease has not run out is renewed there and publishing goes on;
// one whose lease ran out is lost, whether or not it was taken back yet,
// and a renewal never extends it (RenewReplayLease skips it), so a
// stalled process cannot publish a claim someone else may already have
// taken back. Recovery revokes a lapsed claim on its replay_claims row
// before it takes the claim's rows, and a renewal writes the same row, so
// the two take turns: a renewal that began before the lease ran out and
// waited (for the row's lock, for a slow commit) either holds the row or
// has extended the claim when recovery looks, and recovery leaves it, or
// finds it revoked and renews nothing; one that got the row only after the lease it gives (from
// when it began) ran out reports the claim lost. A renewal answered only
// after its own deadline (three quarters of a lease from when it began)
// lets nothing more through either: the lease it gave may have run out
// already.
//
// A claim's lease is renewed on its replay_claims row (one small update
// per claim every Lease/3), not on the claimed rows: rewriting every
// claimed message would churn every index of dead_messages and wait for
// the row locks of settlements. The same row holds the claim's write-ahead
// mark: before publishing, the runner records how far into the batch
// (which goes out in id order) it may publish: the claim marks its first
// 32 messages, and the runner marks up to 512 more, in the background,
// while the previous batch's last 256 messages go out (the publisher takes
// the next batch then), and again whenever fewer than 256 marked ones are
// left. A mark's commit waits for the WAL of the claims and settlements in
// flight, so publishing must not wait for marks made just in time.
//
// Claims whose lease ran out are taken back by whichever instance looks
// first (every Lease/2). Rows at or below the claim's mark may have been
// published: they go back to pending with last_replay_error saying why,
// and their outcome is unknown (below). Rows above it were certainly never
// published: they go back to pending untouched, and the task (resumed
// elsewhere) replays them normally.
//
// # Confirms, returns and unknown outcomes
//
// Publishing uses broker.Publisher: confirm mode, mandatory, returns and
// confirms read from buffered channels that are always drained, and
// returns matched to their publish by x-dlq-replay-id (RabbitMQ sends a
// message's basic.return before its basic.ack). The row becomes replayed
// (replayed_at, replay_count + 1) only on an ack not preceded by a return.
// A return (unroutable), a missing exchange (looked up before the first
// publish to it, so that the broker does not close the channel under the
// other publishes in flight), an exchange dlq's user may not write to
// (403, which names it), or an error put it back to pending with the
// reason: not delivered. A publish that reached a channel already closed
// under it never left: it goes back to the task unsettled, and is
// published like any message not sent yet. One that could not be sent
// because no channel would open (broker.ErrNoChannel: channel_max reached,
// the connection dropping as it opened) is neither failed nor unknown: the
// publisher keeps it and tries again, backing off, while its claim is held
// (taskRun.send). A Conn closed for good ends the run, which hands the
// task back, and Run takes no task again. Publishing waits while an alarm blocks the connection. A publish unconfirmed after
// Config.ConfirmTimeout (time blocked by an alarm not counted) ends
// unknown, and its channel is closed with it, since a late confirm could
// not be told apart. A refusal that closes the channel without naming an
// exchange ends every publish in flight on it as unknown; a user_id
// property other than the connection's user would, so the published
// message drops it unless Config.KeepUserID.
//
// # Unknown outcomes: sent again
//
// A publish whose confirm never came — the connection or the node it went
// through was lost, the confirm timed out, the process died — may or may
// not have been delivered. Its outcome is unknown (unknown.go). With
// on_unknown retry (the default) the row goes back to pending with
// "outcome unknown" in last_replay_error and its item stays unsettled,
// its unknown_count one higher: the task (whichever runner holds it, after
// a crash too) claims it again once the connection is back, no sooner
// than 1 s after the outcome (doubled for each further one), and publishes
// it with the same x-dlq-id and x-dlq-replay-count (the row's replay_count
// did not move: it is the same replay, and the loop guard does not count
// it) and a new x-dlq-replay-id; the task counts it in republished. A nack
// is handled alike: RabbitMQ refuses responsibility for the message, and
// a quorum queue that lost its leader nacks messages it may yet enqueue;
// the channel that saw the nack takes no new publish, because such a
// channel went on being refused after the queue had a new leader. After
// Config.UnknownRetries sends again, an unknown outcome is settled as
// unknown and a nack as failed; with on_unknown hold, at once (the task
// never publishes a claim twice by itself). A message whose earlier copy
// died and came back to its row before it was sent again (the consumer
// raised the row's replay_count to the copy's, recorded on the item as
// copy_replay_count) is not sent again: it was delivered, and its item is
// settled as published when the claim passes it over. One that is no
// longer a message to send when its turn comes (acknowledged, replayed by
// another task, deleted, stopped by the loop guard) is settled as unknown,
// as it is when the task stops first (SettleStoppedRetries): the copy
// sent first may have been delivered, which a skip would deny.
//
// Every settlement of an item names the unknown_count its claim read, and
// changes nothing if it moved: a holder whose claim was taken back (and
// the message made ready to be sent again) cannot settle it. So every
// item is still settled exactly once, and the counters stay exact, after
// kill -9 as after a lost connection. At most 1 + UnknownRetries copies of
// one message can arrive; downstream drops all but one with the pair
// (x-dlq-id, x-dlq-replay-count), which every copy of one replay shares,
// while x-dlq-replay-id is unique per publish (docs/REPLAY.md, "Duplicates
// and unknown outcomes").
//
// # Canary
//
// With a canary, the runner publishes the first Count messages it tries,
// whatever becomes of them (counted from the task's items, so a runner
// that resumes the canary goes on from where it stopped). If any of them
// could not be published (failed, or its outcome unknown) the task ends
// as canary_failed at once; a canary message waiting to be sent again is
// sent again first (and no other message meanwhile), and judged by its
// last copy. Otherwise it records them
// (canary_ids, and each one's x-dlq-replay-id on its item), waits
// WaitSeconds (status canary_wait, persisted, so a restart resumes the
// wait), and then looks whether any of them came back: a row whose last
// death carries one of those replay ids (every copy's, for a message the
// canary sent again after an unknown outcome). Another copy of a canary
// message dying meanwhile (an earlier replay of it, by another task) is
// not the canary dying, and does not stop the task.
// If so the task ends as canary_failed and the rest is not touched;
// otherwise it replays the rest.
//
// # Encryption at rest
//
// A sealed message (package store) is opened just before it is published
// (sealed.go), and a sealed edit with it: a replay sends what arrived. A
// message that cannot be opened (its key is missing, it does not
// authenticate) fails with the reason and sends nothing.
//
// # Cancel
//
// Cancelling sets the task's status in PostgreSQL and sends a notification
// (LISTEN/NOTIFY, scoped to the schema) that reaches the task's runner on
// whatever instance it runs; the runner checks before every publish, so it
// stops within one publish. The lease renewal notices a cancel too, if a
// notification was lost. Claimed messages not yet published go back to
// pending, unsettled; confirms in flight are still recorded; what waited to
// be sent again after an unknown outcome is settled as unknown, also when
// the cancel reached a runner already stopping (a shutdown, a lost lease),
// whose publishes then in flight were to be sent again.
package replay
