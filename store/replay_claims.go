package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replay claims. A runner holds a task with a lease (replay_tasks.
// runner_owner); it claims the task's messages in batches, each batch under
// its own token (dead_messages.claim_owner) and lease. Every write that ends
// a claim names the token and requires status 'replaying', so a holder whose
// lease ran out and whose rows were taken back cannot touch them any more
// (fencing), and a message that died again and came back to its row before
// it was marked (the row is pending again) is left as the consumer wrote it.
//
// Every transaction here takes its locks in the lock order of store/doc.go
// ("Lock order"): dead_messages rows (in id order), replay_task_items,
// replay_tasks (in id order), the counters of applyStatusDeltas, then
// replay_claims.

// lockReplayTasksSQL locks the replay tasks $1 in id order: a transaction
// that writes the counters of several tasks (claim recovery, ingest
// returning rows of several tasks' claims) takes them with it first, in
// the lock order, rather than in whatever order an UPDATE's plan visits
// them. PostgreSQL locks rows as they come out of the ORDER BY (an
// index scan's order, or a sort's), so the order holds whatever the plan.
const lockReplayTasksSQL = `SELECT id FROM replay_tasks WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`

// ReplayItemsAfter returns the ids of at most limit unsettled items of a
// task above the cursor, in order, whose bodies add up to at most maxBytes
// (the first is always returned; 0: no bound), so that one claim never
// loads more than that into memory; more says whether items may remain
// beyond the last one returned. Claiming them is ClaimReplayBatch's job;
// selecting first lets several claims run at once on disjoint items.
// Items whose message is being replayed (this task's own batches in
// flight, or another task's claim) are not worth a claim attempt, and
// items whose message was deleted are left for SkipDeletedReplayItems.
// An item whose publish had an unknown outcome k times waits retryAfter ×
// 2^(k-1) (at most 32 ×) after that outcome before it is sent again
// (0: not at all).
func (s *Store) ReplayItemsAfter(ctx context.Context, taskID, after int64, limit int, maxBytes int64, retryAfter time.Duration) (ids []int64, more bool, err error) {
	return s.replayItemsAfter(ctx, taskID, after, limit, maxBytes, retryAfter, false)
}

// ReplayRetriesAfter is ReplayItemsAfter for only the items that wait to
// be sent again after an unknown outcome or a nack: a canary sends its own
// messages again, and no other, before it judges them.
func (s *Store) ReplayRetriesAfter(ctx context.Context, taskID, after int64, limit int, maxBytes int64, retryAfter time.Duration) (ids []int64, more bool, err error) {
	return s.replayItemsAfter(ctx, taskID, after, limit, maxBytes, retryAfter, true)
}

func (s *Store) replayItemsAfter(ctx context.Context, taskID, after int64, limit int, maxBytes int64, retryAfter time.Duration, retriesOnly bool) (ids []int64, more bool, err error) {
	rows, err := s.pool.Query(ctx, `
SELECT i.message_id, m.body_size
FROM replay_task_items i
CROSS JOIN LATERAL (SELECT d.body_size, d.status, d.last_replay_at FROM dead_messages d WHERE d.id = i.message_id LIMIT 1) m -- one index lookup per item, never a scan
WHERE i.task_id = $1 AND i.outcome IS NULL AND i.message_id > $2 AND m.status <> 'replaying'
  AND (i.unknown_count IS NULL OR $4 = 0 OR m.last_replay_at IS NULL
       OR m.last_replay_at <= now() - $4 * interval '1 millisecond' * (1 << least(i.unknown_count - 1, 5)))
  AND (NOT $5::boolean OR i.unknown_count > 0)
ORDER BY i.message_id LIMIT $3`, taskID, after, limit, retryAfter.Milliseconds(), retriesOnly)
	if err != nil {
		return nil, false, fmt.Errorf("store: next items of replay task %d: %w", taskID, err)
	}
	defer rows.Close()
	var total int64
	n := 0
	for rows.Next() {
		var id, size int64
		if err := rows.Scan(&id, &size); err != nil {
			return nil, false, fmt.Errorf("store: next items of replay task %d: %w", taskID, err)
		}
		n++
		total += size
		if len(ids) > 0 && maxBytes > 0 && total > maxBytes {
			more = true
			break
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("store: next items of replay task %d: %w", taskID, err)
	}
	return ids, more || n == limit, nil
}

// DropReplayClaimMarks drops the write-ahead marks of claims that ended.
func (s *Store) DropReplayClaimMarks(ctx context.Context, tokens []string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM replay_claims WHERE token = ANY($1)`, tokens); err != nil {
		return fmt.Errorf("store: drop %d replay claim marks: %w", len(tokens), err)
	}
	return nil
}

// ClaimedMessage is a message claimed for replay, with what is needed to
// publish it.
type ClaimedMessage struct {
	ID               int64
	SourceQueue      string
	Group            int64
	SourceExchange   string
	SourceRoutingKey string
	Properties       []byte
	Headers          []byte
	Body             []byte
	BodySize         int64
	// ReplayCount is the count before this replay.
	ReplayCount int64
	// Unknowns is how many of this task's publishes of the message had an
	// unknown outcome (0: this is its first). A publish's outcome carries
	// it (ReplayOutcome.Attempt).
	Unknowns int
	// Sealed is a sealed row's encrypted part (seal.go): Properties,
	// Headers (those left plain only) and Body are then to be opened from
	// it. Nil for a plain row.
	Sealed *Sealed
}

// ClaimResult is what one ClaimReplayBatch call did.
type ClaimResult struct {
	Messages []ClaimedMessage
	// Skipped items were settled as skipped (loop guard, status).
	Skipped int
	// Unknown items were settled as unknown: they waited to be sent again
	// after an unknown outcome, and their message is no longer one the task
	// sends (acknowledged, replayed, stopped by the loop guard), so the copy
	// sent first may have been delivered (notSentAgainSQL).
	Unknown int
	// Deferred items are being replayed under another claim; they stay
	// unsettled and are looked at again on a later pass.
	Deferred int
	// Returned items were settled as published without a publish: a copy
	// sent before an unknown outcome died and came back to its row, so it
	// was delivered, and is not sent again.
	Returned int
	// Scanned is how many items were looked at; Last the highest id among
	// them (the next cursor). Scanned < Limit means the pass reached the end,
	// except for items locked by others at that moment.
	Scanned int
	Last    int64
}

// ClaimReplayBatch takes the next unsettled items of a task above the
// cursor: pending messages go to replaying under the claim's token;
// messages the loop guard stops, and messages that are no longer pending,
// are settled as skipped with the reason, or as unknown if they waited to
// be sent again after an unknown outcome (notSentAgainSQL). Rows another transaction holds
// are passed over (SKIP LOCKED), so concurrent claimers never wait for each
// other and never take the same row.
func (s *Store) ClaimReplayBatch(ctx context.Context, c ReplayClaim) (ClaimResult, error) {
	// The items first, by the task's keyset: a join would let the planner
	// walk dead_messages from its first row on every call.
	items := c.IDs
	if len(items) == 0 {
		var err error
		if items, _, err = s.ReplayItemsAfter(ctx, c.TaskID, c.After, c.Limit, 0, 0); err != nil {
			return ClaimResult{}, err
		}
		if len(items) == 0 {
			return ClaimResult{}, nil
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("store: begin claim for replay task %d: %w", c.TaskID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	res := ClaimResult{Scanned: len(items), Last: items[len(items)-1]}
	l, err := lockClaimRows(ctx, tx, c, items)
	if err != nil {
		return ClaimResult{}, err
	}
	res.Deferred = l.deferred
	var moves []StatusMove
	if res.Messages, moves, err = claimRows(ctx, tx, c, l.claimable); err != nil {
		return ClaimResult{}, err
	}
	// A pending row the claim passed over had its item settled since it
	// was selected, or is back from the dead after an unknown outcome; so,
	// perhaps, is one the loop guard stops (the copy that came back raised
	// its replay_count). Rare, and looked for only then.
	returned, err := settleReturned(ctx, tx, c.TaskID, append(l.guarded, passedOver(l.claimable, res.Messages)...))
	if err != nil {
		return ClaimResult{}, err
	}
	if len(returned) > 0 {
		l.skips = without(l.skips, returned)
		res.Returned = len(returned)
	}
	if res.Skipped, res.Unknown, err = recordClaim(ctx, tx, c, res.Messages, l.skips, returned); err != nil {
		return ClaimResult{}, err
	}
	if err := applyStatusDeltas(ctx, tx, moves); err != nil {
		return ClaimResult{}, fmt.Errorf("store: claim for replay task %d: %w", c.TaskID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return ClaimResult{}, fmt.Errorf("store: commit claim for replay task %d: %w", c.TaskID, err)
	}
	return res, nil
}

// lockedClaimRows sorts the rows a claim locked by what it does with each.
type lockedClaimRows struct {
	claimable []int64
	guarded   []int64 // pending, stopped by the loop guard
	skips     []claimSkip
	deferred  int // replaying in another task: asked again later
}

// claimSkip is an item a claim settles without taking its message: why
// is its detail when it is skipped, cause what became of its message, for
// its detail when it waited to be sent again and so is unknown
// (notSentAgain).
type claimSkip struct {
	id         int64
	why, cause string
}

// lockClaimRows locks the message rows of items a claim may take and
// sorts them by their status now.
func lockClaimRows(ctx context.Context, tx pgx.Tx, c ReplayClaim, items []int64) (lockedClaimRows, error) {
	// The rows are locked in id order, passing over rows another
	// transaction holds (FOR NO KEY UPDATE: the claim changes no key, and
	// so is not held up by the FOR KEY SHARE of an earlier version's text
	// indexer during a rolling upgrade). Only the
	// message rows: every write that settles an item of a message it can still claim holds the message's row
	// (claims, settlements, lease recovery), so the row lock is enough, and
	// locking the items too cost a WAL record per message.
	rows, err := tx.Query(ctx, `
SELECT m.id, m.status, m.replay_count FROM unnest($1::bigint[]) AS x(id)
JOIN dead_messages m ON m.id = x.id
ORDER BY m.id
FOR NO KEY UPDATE OF m SKIP LOCKED`, items)
	if err != nil {
		return lockedClaimRows{}, fmt.Errorf("store: lock rows for replay task %d: %w", c.TaskID, err)
	}
	var l lockedClaimRows
	for rows.Next() {
		var (
			id, replays int64
			status      string
		)
		if err := rows.Scan(&id, &status, &replays); err != nil {
			rows.Close()
			return lockedClaimRows{}, fmt.Errorf("store: lock rows for replay task %d: %w", c.TaskID, err)
		}
		// A locked row is read as it is now, whatever the statement's
		// snapshot: its status is the one the claim would change.
		switch {
		case status == StatusPending && (replays < int64(c.MaxReplays) || c.Force):
			l.claimable = append(l.claimable, id)
		case status == StatusReplaying:
			l.deferred++
		case status == StatusPending:
			l.guarded = append(l.guarded, id)
			l.skips = append(l.skips, claimSkip{id: id,
				why:   fmt.Sprintf("loop guard: replayed %d times already (max_replays %d); use force to replay it anyway", replays, c.MaxReplays),
				cause: fmt.Sprintf("the loop guard stopped the message (replayed %d times already, max_replays %d)", replays, c.MaxReplays)})
		default:
			l.skips = append(l.skips, claimSkip{id: id,
				why:   fmt.Sprintf("status is %s: only pending messages are replayed", status),
				cause: "the message was " + status})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return lockedClaimRows{}, fmt.Errorf("store: lock rows for replay task %d: %w", c.TaskID, err)
	}
	return l, nil
}

// claimRows claims the claimable rows for the task: they become
// replaying under the claim's token and lease. It returns them in id
// order, with the moves of the status counters.
func claimRows(ctx context.Context, tx pgx.Tx, c ReplayClaim, claimable []int64) ([]ClaimedMessage, []StatusMove, error) {
	// The claim is a statement of its own: its snapshot is taken
	// after the locks were granted, so it sees every change committed to
	// these rows, and every item settled with them, up to now (a statement
	// that locks sees the latest version of a locked row, but still the
	// old snapshot of everything else). The item is checked there: it may
	// have been settled (published by this task's previous claim, or taken
	// back as unknown) since it was selected.
	//
	// A row whose ingest batch has left ingest_inflight (its
	// acknowledgement is known to have reached the broker) no longer
	// takes part in redelivery matching; the claim clears its batch, so
	// that neither this rewrite nor the settlement's enters
	// dead_messages_ingest_match. A batch still in flight stays: a
	// redelivery of it must still find the row (matchRedelivery, whose
	// update waits for this row's lock and cannot slip in between). A
	// batch never comes back to ingest_inflight once it left.
	if len(claimable) == 0 {
		return nil, nil, nil
	}
	rows, err := tx.Query(ctx, claimRowsSQL, claimable, c.TaskID, c.Token, c.Lease.Milliseconds())
	if err != nil {
		return nil, nil, fmt.Errorf("store: claim for replay task %d: %w", c.TaskID, err)
	}
	claimed, moves, err := readClaimedRows(rows, c.TaskID)
	if err != nil {
		return nil, nil, err
	}
	// Published in id order (the write-ahead mark relies on it).
	slices.SortFunc(claimed, func(a, b ClaimedMessage) int { return cmp.Compare(a.ID, b.ID) })
	return claimed, moves, nil
}

// claimRowsSQL claims the rows of ids $1 for task $2 under token $3, for
// a lease of $4 milliseconds, and returns them as ClaimedMessage columns.
const claimRowsSQL = `
WITH x AS MATERIALIZED (
    -- Driving from the ids keeps the plan to index probes whatever the
    -- tables' statistics say (a task's items are often minutes old).
    SELECT unnest($1::bigint[]) AS id
)
UPDATE dead_messages m SET status = 'replaying', claim_owner = $3,
    claim_expires_at = now() + $4 * interval '1 millisecond',
    replay_task_id = $2, status_changed_at = now(),
    ingest_batch = CASE WHEN EXISTS (SELECT 1 FROM ingest_inflight f WHERE f.batch_id = m.ingest_batch)
                        THEN m.ingest_batch END
FROM x
-- One probe per id: joined, the items' statistics (every item of the task
-- unsettled when it was created) made the planner hash the whole task's
-- items on every claim.
CROSS JOIN LATERAL (
    SELECT i.unknown_count, i.copy_replay_count FROM replay_task_items i
    WHERE i.task_id = $2 AND i.message_id = x.id AND i.outcome IS NULL LIMIT 1) i
-- A message whose earlier publish had an unknown outcome is sent again
-- only if none of those copies came back dead meanwhile: the consumer
-- raises the row's replay_count to the copy's x-dlq-replay-count.
WHERE m.id = x.id AND (i.copy_replay_count IS NULL OR m.replay_count < i.copy_replay_count)
RETURNING m.id, m.replay_count, m.source_queue, coalesce(m.group_id, 0), m.source_exchange,
    m.source_routing_key, m.properties::text, m.headers::text, m.body, m.body_size,
    m.enc_key_id, m.enc_dek, m.enc_nonce, m.enc_meta, coalesce(i.unknown_count, 0)`

// readClaimedRows reads claimRowsSQL's rows (and closes them): the
// messages claimed, in the order read, and the moves of the status
// counters, by queue and group in the order first seen.
func readClaimedRows(rows pgx.Rows, taskID int64) ([]ClaimedMessage, []StatusMove, error) {
	var claimed []ClaimedMessage
	moves := map[moveKey]*StatusMove{}
	var moveToKeys []moveKey
	for rows.Next() {
		var (
			m     ClaimedMessage
			keyID *string
			sl    Sealed
		)
		if err := rows.Scan(&m.ID, &m.ReplayCount, &m.SourceQueue, &m.Group, &m.SourceExchange, &m.SourceRoutingKey,
			&m.Properties, &m.Headers, &m.Body, &m.BodySize, &keyID, &sl.Envelope.DEK, &sl.Envelope.Nonce, &sl.Meta, &m.Unknowns); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("store: read claim for replay task %d: %w", taskID, err)
		}
		if keyID != nil {
			sl.Envelope.KeyID, sl.Body, m.Body = *keyID, m.Body, nil
			m.Sealed = &sl
		}
		claimed = append(claimed, m)
		k := moveKey{m.SourceQueue, m.Group}
		mv := moves[k]
		if mv == nil {
			mv = &StatusMove{Queue: k.queue, Group: k.group, From: StatusPending, To: StatusReplaying}
			moves[k] = mv
			moveToKeys = append(moveToKeys, k)
		}
		mv.Messages++
		mv.Bytes += m.BodySize
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("store: claim for replay task %d: %w", taskID, err)
	}
	list := make([]StatusMove, 0, len(moveToKeys))
	for _, k := range moveToKeys {
		list = append(list, *moves[k])
	}
	return claimed, list, nil
}

// recordClaim settles the items of skips (skipped, or unknown if they
// waited to be sent again: notSentAgainSQL), adds the claim to the task's
// counters and, when it claimed rows, records its lease and write-ahead
// mark. It returns how many items it settled as skipped and as unknown.
func recordClaim(ctx context.Context, tx pgx.Tx, c ReplayClaim, claimed []ClaimedMessage, skips []claimSkip, returned []int64) (skipped, unknown int, err error) {
	ids, whys, lost := make([]int64, len(skips)), make([]string, len(skips)), make([]string, len(skips))
	for i, k := range skips {
		ids[i], whys[i], lost[i] = k.id, k.why, notSentAgain(k.cause)
	}
	var b pgx.Batch
	// The items are settled here; the counters add those this statement
	// settled, exactly.
	b.Queue(`
WITH s AS (
    UPDATE replay_task_items i SET outcome = `+notSentAgainSQL+`,
        detail = CASE WHEN `+waitingItemSQL+` THEN o.lost ELSE o.why END
    FROM unnest($3::bigint[], $4::text[], $7::text[]) AS o(id, why, lost)
    WHERE i.task_id = $1 AND i.message_id = o.id AND i.outcome IS NULL
    RETURNING i.outcome
), n AS (SELECT count(*) FILTER (WHERE outcome = 'skipped') AS s, count(*) FILTER (WHERE outcome = 'unknown') AS u FROM s)
-- claimed is the items claims settled and the rows being replayed: the
-- rows claimed join it, and so do the items settled published as back
-- from the dead ($5, settleReturned) and those settled unknown, which had
-- left it when they were to be sent again.
UPDATE replay_tasks SET claimed = claimed + $2 + cardinality($5::bigint[]) + n.u, skipped = skipped + n.s,
    unknown = unknown + n.u, published = published + cardinality($5::bigint[]),
    canary_ids = CASE WHEN $6 THEN canary_ids || $5::bigint[] ELSE canary_ids END,
    updated_at = now()
FROM n WHERE id = $1
RETURNING n.s, n.u`, c.TaskID, len(claimed), ids, whys, nonNilIDs(returned), c.Canary, lost).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&skipped, &unknown)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if len(claimed) > 0 {
		// The claim's lease and write-ahead mark (0: nothing may be
		// published yet).
		var through int64
		if c.MarkFirst > 0 {
			through = claimed[min(c.MarkFirst, len(claimed))-1].ID
		}
		b.Queue(`INSERT INTO replay_claims (token, task_id, through_id, expires_at) VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')`,
			c.Token, c.TaskID, through, c.Lease.Milliseconds())
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return 0, 0, fmt.Errorf("store: record claim for replay task %d: %w", c.TaskID, err)
	}
	return skipped, unknown, nil
}

type moveKey struct {
	queue string
	group int64
}

// MarkReplayClaim records, before anything is published, that the messages
// of a claim with ids up to throughID may be published. A claim's messages
// go out in id order, so when its holder dies the rows above the mark were
// certainly never published (see RecoverExpiredReplayClaims).
func (s *Store) MarkReplayClaim(ctx context.Context, taskID int64, token string, throughID int64) error {
	_, err := s.pool.Exec(ctx, `
INSERT INTO replay_claims (token, task_id, through_id) VALUES ($1, $2, $3)
ON CONFLICT (token) DO UPDATE SET through_id = greatest(replay_claims.through_id, EXCLUDED.through_id), updated_at = now()`,
		token, taskID, throughID)
	if err != nil {
		return fmt.Errorf("store: mark replay claim %s of task %d: %w", token, taskID, err)
	}
	return nil
}
