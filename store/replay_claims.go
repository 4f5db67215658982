package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
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
// Lock order, the same in every transaction here: dead_messages rows (in id
// order), replay_task_items, replay_tasks, then the counters of
// applyStatusDeltas.

// ErrReplayLeaseLost means the caller no longer holds the task it names.
var ErrReplayLeaseLost = errors.New("replay task lease lost")

// AcquireReplayTask gives owner one task that is due and that no live
// runner holds, for lease; ok is false when there is none. SKIP LOCKED
// lets instances look at the same time without waiting for each other.
func (s *Store) AcquireReplayTask(ctx context.Context, owner string, lease time.Duration, exclude []int64) (ReplayTask, bool, error) {
	t, err := scanReplayTask(s.pool.QueryRow(ctx, `
UPDATE replay_tasks SET runner_owner = $1, runner_expires_at = now() + $2 * interval '1 millisecond',
    status = CASE WHEN status = 'scheduled' THEN 'running' ELSE status END,
    started_at = coalesce(started_at, now()), updated_at = now()
WHERE id = (
    SELECT id FROM replay_tasks
    WHERE status IN ('scheduled', 'running', 'canary_wait') AND start_at <= now()
      AND (runner_expires_at IS NULL OR runner_expires_at < now())
      AND NOT (id = ANY($3::bigint[]))
    ORDER BY start_at, id LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING `+replayTaskColumns, owner, lease.Milliseconds(), nonNilIDs(exclude)))
	if errors.Is(err, pgx.ErrNoRows) {
		return ReplayTask{}, false, nil
	}
	if err != nil {
		return ReplayTask{}, false, fmt.Errorf("store: acquire replay task: %w", err)
	}
	return t, true, nil
}

// NextReplayTaskDue returns the next moment, after now, at which a task
// that is not running here (exclude) may become takeable: a scheduled
// task's start, or the end of the lease of a runner that holds one
// (another instance may have died). Zero when no such moment is coming.
// Past moments are left out: a task due now is either taken already or
// held by a live runner, and counting it would make an idle runner wake up
// at once, again and again.
func (s *Store) NextReplayTaskDue(ctx context.Context, exclude []int64) (time.Time, error) {
	var at *time.Time
	err := s.pool.QueryRow(ctx, `
SELECT min(greatest(start_at, coalesce(runner_expires_at, start_at))) FROM replay_tasks
WHERE status IN ('scheduled', 'running', 'canary_wait') AND NOT (id = ANY($1::bigint[]))
  AND greatest(start_at, coalesce(runner_expires_at, start_at)) > now()`, nonNilIDs(exclude)).Scan(&at)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: next replay task due: %w", err)
	}
	if at == nil {
		return time.Time{}, nil
	}
	return *at, nil
}

// RenewReplayLease extends owner's lease on the task and on the message
// claims named by tokens (on their replay_claims rows: cheap, and never
// waiting for row locks). It returns the task's status (an operator may
// have cancelled it) and the tokens it renewed, or ErrReplayLeaseLost when
// owner no longer holds the task. A claim whose lease already ran out is
// not renewed, even if nobody took it back yet: from then on its holder
// must not publish from it (fencing), since RecoverExpiredReplayClaims may
// take it at any moment, and may have already. The two updates are
// separate statements: neither waits for the other's locks, so a renewal
// can never deadlock with a settlement.
func (s *Store) RenewReplayLease(ctx context.Context, taskID int64, owner string, tokens []string, lease time.Duration) (status string, renewed []string, err error) {
	if len(tokens) > 0 {
		rows, err := s.pool.Query(ctx, `
UPDATE replay_claims SET expires_at = now() + $2 * interval '1 millisecond'
WHERE token = ANY($1) AND expires_at > now()
RETURNING token`, tokens, lease.Milliseconds())
		if err != nil {
			return "", nil, fmt.Errorf("store: renew claims of replay task %d: %w", taskID, err)
		}
		if renewed, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return "", nil, fmt.Errorf("store: renew claims of replay task %d: %w", taskID, err)
		}
	}
	err = s.pool.QueryRow(ctx, `
UPDATE replay_tasks SET runner_expires_at = now() + $3 * interval '1 millisecond'
WHERE id = $1 AND runner_owner = $2
RETURNING status`, taskID, owner, lease.Milliseconds()).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, fmt.Errorf("replay task %d: %w", taskID, ErrReplayLeaseLost)
	}
	if err != nil {
		return "", nil, fmt.Errorf("store: renew lease of replay task %d: %w", taskID, err)
	}
	return status, renewed, nil
}

// ReleaseReplayTask gives a task back without changing its status, so
// another runner (another instance, or this one after a restart) resumes
// it at once instead of waiting for the lease to run out.
func (s *Store) ReleaseReplayTask(ctx context.Context, taskID int64, owner string) error {
	_, err := s.pool.Exec(ctx, `
UPDATE replay_tasks SET runner_owner = NULL, runner_expires_at = NULL, updated_at = now()
WHERE id = $1 AND runner_owner = $2`, taskID, owner)
	if err != nil {
		return fmt.Errorf("store: release replay task %d: %w", taskID, err)
	}
	return nil
}

// ReplayTaskUpdate changes a task's status or canary state. Only the
// non-zero fields are written.
type ReplayTaskUpdate struct {
	Status string
	// Error is recorded with the status (cleared when empty and Status set).
	Error string
	// Finish sets finished_at and releases the runner.
	Finish bool
	// StartCanary records now as the canary's start.
	StartCanary bool
	// CanaryWait sets canary_until to now + CanaryWait (status canary_wait).
	CanaryWait time.Duration
	// CanaryPassed records that the canary found no message dead again.
	CanaryPassed bool
}

// UpdateReplayTask applies u to the task if owner holds it and its status
// is one of from. It returns the task as updated, or ErrReplayLeaseLost.
func (s *Store) UpdateReplayTask(ctx context.Context, taskID int64, owner string, from []string, u ReplayTaskUpdate) (ReplayTask, error) {
	var status, errText any
	if u.Status != "" {
		status, errText = u.Status, nullText(u.Error)
	}
	var canaryUntil any
	if u.CanaryWait > 0 {
		canaryUntil = u.CanaryWait.Milliseconds()
	}
	t, err := scanReplayTask(s.pool.QueryRow(ctx, `
UPDATE replay_tasks SET
    status = coalesce($4, status),
    error = CASE WHEN $4::text IS NULL THEN error ELSE $5 END,
    finished_at = CASE WHEN $6 THEN now() ELSE finished_at END,
    runner_owner = CASE WHEN $6 THEN NULL ELSE runner_owner END,
    runner_expires_at = CASE WHEN $6 THEN NULL ELSE runner_expires_at END,
    canary_started_at = CASE WHEN $7 THEN now() ELSE canary_started_at END,
    canary_until = CASE WHEN $8::bigint IS NULL THEN canary_until ELSE now() + $8 * interval '1 millisecond' END,
    canary_passed = canary_passed OR $9,
    updated_at = now()
WHERE id = $1 AND runner_owner = $2 AND status = ANY($3)
RETURNING `+replayTaskColumns, taskID, owner, from, status, errText, u.Finish, u.StartCanary, canaryUntil, u.CanaryPassed))
	if errors.Is(err, pgx.ErrNoRows) {
		return ReplayTask{}, fmt.Errorf("replay task %d (status not in %v): %w", taskID, from, ErrReplayLeaseLost)
	}
	if err != nil {
		return ReplayTask{}, fmt.Errorf("store: update replay task %d: %w", taskID, err)
	}
	return t, nil
}

// ReplayClaim asks for the next messages of a task.
type ReplayClaim struct {
	TaskID int64
	// Token names this claim; every later write of these rows names it.
	Token string
	Lease time.Duration
	// After is the keyset cursor: only message ids above it are looked at.
	After int64
	// Limit bounds how many items one call looks at.
	Limit int
	// MaxReplays is the loop guard; Force lifts it.
	MaxReplays int
	Force      bool
	// IDs, when set, are the items to claim (from ReplayItemsAfter); After
	// and Limit are then ignored.
	IDs []int64
	// MarkFirst, when > 0, writes the claim's write-ahead mark (see
	// MarkReplayClaim) over its first MarkFirst messages in the claim's
	// own transaction, so publishing can start without waiting for it.
	MarkFirst int
}

// ReplayItemsAfter returns the ids of at most limit unsettled items of a
// task above the cursor, in order, whose bodies add up to at most maxBytes
// (the first is always returned; 0: no bound), so that one claim never
// loads more than that into memory; more says whether items may remain
// beyond the last one returned. Claiming them is ClaimReplayBatch's job;
// selecting first lets several claims run at once on disjoint items.
// Items whose message is being replayed (this task's own batches in
// flight, or another task's claim) are not worth a claim attempt, and
// items whose message was deleted are left for SkipDeletedReplayItems.
func (s *Store) ReplayItemsAfter(ctx context.Context, taskID, after int64, limit int, maxBytes int64) (ids []int64, more bool, err error) {
	rows, err := s.pool.Query(ctx, `
SELECT i.message_id, m.body_size
FROM replay_task_items i
CROSS JOIN LATERAL (SELECT d.body_size, d.status FROM dead_messages d WHERE d.id = i.message_id LIMIT 1) m -- one index lookup per item, never a scan
WHERE i.task_id = $1 AND i.outcome IS NULL AND i.message_id > $2 AND m.status <> 'replaying'
ORDER BY i.message_id LIMIT $3`, taskID, after, limit)
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
	// Deferred items are being replayed under another claim; they stay
	// unsettled and are looked at again on a later pass.
	Deferred int
	// Scanned is how many items were looked at; Last the highest id among
	// them (the next cursor). Scanned < Limit means the pass reached the end,
	// except for items locked by others at that moment.
	Scanned int
	Last    int64
}

// ClaimReplayBatch takes the next unsettled items of a task above the
// cursor: pending messages go to replaying under the claim's token;
// messages the loop guard stops, and messages that are no longer pending,
// are settled as skipped with the reason. Rows another transaction holds
// are passed over (SKIP LOCKED), so concurrent claimers never wait for each
// other and never take the same row.
func (s *Store) ClaimReplayBatch(ctx context.Context, c ReplayClaim) (ClaimResult, error) {
	// The items first, by the task's keyset: a join would let the planner
	// walk dead_messages from its first row on every call.
	items := c.IDs
	if len(items) == 0 {
		var err error
		if items, _, err = s.ReplayItemsAfter(ctx, c.TaskID, c.After, c.Limit, 0); err != nil {
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
	// First the rows are locked, in id order, passing over rows another
	// transaction holds. Only the message rows: every write that settles
	// an item of a message it can still claim holds the message's row
	// (claims, settlements, lease recovery), so the row lock is enough, and
	// locking the items too cost a WAL record per message.
	rows, err := tx.Query(ctx, `
SELECT m.id, m.status, m.replay_count FROM unnest($1::bigint[]) AS x(id)
JOIN dead_messages m ON m.id = x.id
ORDER BY m.id
FOR UPDATE OF m SKIP LOCKED`, items)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("store: lock rows for replay task %d: %w", c.TaskID, err)
	}
	var (
		res       = ClaimResult{Scanned: len(items), Last: items[len(items)-1]}
		claimable []int64
		skipIDs   []int64
		skipWhy   []string
	)
	for rows.Next() {
		var (
			id, replays int64
			status      string
		)
		if err := rows.Scan(&id, &status, &replays); err != nil {
			rows.Close()
			return ClaimResult{}, fmt.Errorf("store: lock rows for replay task %d: %w", c.TaskID, err)
		}
		// A locked row is read as it is now, whatever the statement's
		// snapshot: its status is the one the claim would change.
		switch {
		case status == StatusPending && (replays < int64(c.MaxReplays) || c.Force):
			claimable = append(claimable, id)
		case status == StatusReplaying:
			res.Deferred++
		case status == StatusPending:
			skipIDs = append(skipIDs, id)
			skipWhy = append(skipWhy, fmt.Sprintf("loop guard: replayed %d times already (max_replays %d); use force to replay it anyway", replays, c.MaxReplays))
		default:
			skipIDs = append(skipIDs, id)
			skipWhy = append(skipWhy, fmt.Sprintf("status is %s: only pending messages are replayed", status))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return ClaimResult{}, fmt.Errorf("store: lock rows for replay task %d: %w", c.TaskID, err)
	}
	// Then the claim, in a statement of its own: its snapshot is taken
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
	moves := map[moveKey]*StatusMove{}
	var moveToKeys []moveKey
	if len(claimable) > 0 {
		rows, err = tx.Query(ctx, `
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
    SELECT 1 FROM replay_task_items i
    WHERE i.task_id = $2 AND i.message_id = x.id AND i.outcome IS NULL LIMIT 1) i
WHERE m.id = x.id
RETURNING m.id, m.replay_count, m.source_queue, coalesce(m.group_id, 0), m.source_exchange,
    m.source_routing_key, m.properties::text, m.headers::text, m.body, m.body_size,
    m.enc_key_id, m.enc_dek, m.enc_nonce, m.enc_meta`,
			claimable, c.TaskID, c.Token, c.Lease.Milliseconds())
		if err != nil {
			return ClaimResult{}, fmt.Errorf("store: claim for replay task %d: %w", c.TaskID, err)
		}
		for rows.Next() {
			var (
				m     ClaimedMessage
				keyID *string
				sl    Sealed
			)
			if err := rows.Scan(&m.ID, &m.ReplayCount, &m.SourceQueue, &m.Group, &m.SourceExchange, &m.SourceRoutingKey,
				&m.Properties, &m.Headers, &m.Body, &m.BodySize, &keyID, &sl.Envelope.DEK, &sl.Envelope.Nonce, &sl.Meta); err != nil {
				rows.Close()
				return ClaimResult{}, fmt.Errorf("store: read claim for replay task %d: %w", c.TaskID, err)
			}
			if keyID != nil {
				sl.Envelope.KeyID, sl.Body, m.Body = *keyID, m.Body, nil
				m.Sealed = &sl
			}
			res.Messages = append(res.Messages, m)
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
			return ClaimResult{}, fmt.Errorf("store: claim for replay task %d: %w", c.TaskID, err)
		}
		// Published in id order (the write-ahead mark relies on it).
		slices.SortFunc(res.Messages, func(a, b ClaimedMessage) int { return cmp.Compare(a.ID, b.ID) })
	}
	var b pgx.Batch
	// Skipped items are settled here; the counter adds those this
	// statement settled, exactly.
	var skipped int64
	b.Queue(`
WITH s AS (
    UPDATE replay_task_items i SET outcome = 'skipped', detail = o.why
    FROM unnest($3::bigint[], $4::text[]) AS o(id, why)
    WHERE i.task_id = $1 AND i.message_id = o.id AND i.outcome IS NULL
    RETURNING 1
), n AS (SELECT count(*) AS n FROM s)
UPDATE replay_tasks SET claimed = claimed + $2, skipped = skipped + n.n, updated_at = now()
FROM n WHERE id = $1
RETURNING n.n`, c.TaskID, len(res.Messages), nonNilIDs(skipIDs), nonNilStrings(skipWhy)).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&skipped)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if len(res.Messages) > 0 {
		// The claim's lease and write-ahead mark (0: nothing may be
		// published yet).
		var through int64
		if c.MarkFirst > 0 {
			through = res.Messages[min(c.MarkFirst, len(res.Messages))-1].ID
		}
		b.Queue(`INSERT INTO replay_claims (token, task_id, through_id, expires_at) VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')`,
			c.Token, c.TaskID, through, c.Lease.Milliseconds())
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return ClaimResult{}, fmt.Errorf("store: record claim for replay task %d: %w", c.TaskID, err)
	}
	res.Skipped = int(skipped)
	list := make([]StatusMove, 0, len(moveToKeys))
	for _, k := range moveToKeys {
		list = append(list, *moves[k])
	}
	if err := applyStatusDeltas(ctx, tx, list); err != nil {
		return ClaimResult{}, fmt.Errorf("store: claim for replay task %d: %w", c.TaskID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return ClaimResult{}, fmt.Errorf("store: commit claim for replay task %d: %w", c.TaskID, err)
	}
	return res, nil
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

// ReplayOutcome is how one claimed message ended.
type ReplayOutcome struct {
	ID    int64
	Token string
	// Result is OutcomePublished, OutcomeFailed, OutcomeUnknown or
	// OutcomeReleased.
	Result string
	// Error is recorded as last_replay_error (failed, unknown).
	Error string
	// ReplayID, on a published outcome, is recorded as the item's detail:
	// the x-dlq-replay-id it went out with. The canary sets it, to know its
	// own publishes when they die again (CanaryDiedAgain).
	ReplayID string
}

// SettleResult counts what SettleReplayOutcomes recorded for the task.
type SettleResult struct {
	Published, Failed, Unknown, Released int64
	// Marked is how many rows actually changed status; a row can be missing
	// because it died again and came back first, or because the claim was
	// taken back after its lease.
	Marked int64
}

// SettleReplayOutcomes ends claims: published messages become replayed
// (replayed_at, replay_count + 1); failed and unknown ones go back to
// pending with the error recorded; released ones go back to pending
// untouched and stay unsettled for the task. Each row changes only if it
// is still replaying under the token the outcome names. The task's items
// and counters, and the summary counters, change in the same transaction.
// canary adds the published ids to the task's canary set.
//
// finished names claims that end with these outcomes: their write-ahead
// marks are dropped in the same transaction.
func (s *Store) SettleReplayOutcomes(ctx context.Context, taskID int64, outs []ReplayOutcome, canary bool, finished ...string) (SettleResult, error) {
	if len(outs) == 0 {
		return SettleResult{}, nil
	}
	outs = slices.Clone(outs)
	slices.SortFunc(outs, func(a, b ReplayOutcome) int { return cmp.Compare(a.ID, b.ID) })
	n := len(outs)
	ids, toks, kinds, errs := make([]int64, n), make([]string, n), make([]string, n), make([]*string, n)
	var res SettleResult
	var itemIDs []int64
	var itemKinds []string
	var itemErrs []*string
	for i, o := range outs {
		ids[i], toks[i], kinds[i] = o.ID, o.Token, o.Result
		switch o.Result {
		case OutcomePublished:
			if o.ReplayID != "" {
				// The item's detail; the row's error is cleared on publish.
				id := cleanText(o.ReplayID)
				errs[i] = &id
			}
		case OutcomeFailed, OutcomeUnknown:
			e := cleanText(o.Error)
			errs[i] = &e
		case OutcomeReleased:
			res.Released++
		default:
			return SettleResult{}, fmt.Errorf("store: settle replay task %d: message %d: unknown outcome %q", taskID, o.ID, o.Result)
		}
		if o.Result != OutcomeReleased {
			itemIDs = append(itemIDs, o.ID)
			itemKinds = append(itemKinds, o.Result)
			itemErrs = append(itemErrs, errs[i])
		}
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return SettleResult{}, fmt.Errorf("store: begin settling replay task %d: %w", taskID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, settleRowsSQL, ids, toks, kinds, errs)
	if err != nil {
		return SettleResult{}, fmt.Errorf("store: settle replay task %d: %w", taskID, err)
	}
	moves, err := statusMovesSQL(rows)
	if err != nil {
		return SettleResult{}, fmt.Errorf("store: settle replay task %d: %w", taskID, err)
	}
	for _, m := range moves {
		res.Marked += m.Messages
	}
	err = tx.QueryRow(ctx, `
WITH s AS (
    -- message_id = ANY bounds the rows the planner expects to a batch's
    -- worth: joined only, the items' statistics (every item of the task
    -- unsettled when it was created) made it hash the whole task's items
    -- on every settlement.
    UPDATE replay_task_items i SET outcome = o.kind, detail = o.err
    FROM unnest($2::bigint[], $3::text[], $4::text[]) AS o(id, kind, err)
    WHERE i.task_id = $1 AND i.message_id = ANY($2) AND i.message_id = o.id AND i.outcome IS NULL
    RETURNING i.message_id, i.outcome
), c AS (
    SELECT count(*) FILTER (WHERE outcome = 'published') AS p,
           count(*) FILTER (WHERE outcome = 'failed') AS f,
           count(*) FILTER (WHERE outcome = 'unknown') AS u,
           coalesce(array_agg(message_id) FILTER (WHERE outcome = 'published'), '{}') AS pub
    FROM s
)
UPDATE replay_tasks t SET published = t.published + c.p, failed = t.failed + c.f, unknown = t.unknown + c.u,
    claimed = t.claimed - $5,
    canary_ids = CASE WHEN $6 THEN t.canary_ids || c.pub ELSE t.canary_ids END,
    updated_at = now()
FROM c WHERE t.id = $1
RETURNING c.p, c.f, c.u`, taskID, nonNilIDs(itemIDs), nonNilStrings(itemKinds), itemErrs, res.Released, canary).
		Scan(&res.Published, &res.Failed, &res.Unknown)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return SettleResult{}, fmt.Errorf("store: count outcomes of replay task %d: %w", taskID, err)
	}
	if err := applyStatusDeltas(ctx, tx, moves); err != nil {
		return SettleResult{}, fmt.Errorf("store: settle replay task %d: %w", taskID, err)
	}
	if len(finished) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM replay_claims WHERE token = ANY($1)`, finished); err != nil {
			return SettleResult{}, fmt.Errorf("store: drop claim marks of replay task %d: %w", taskID, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return SettleResult{}, fmt.Errorf("store: commit settling replay task %d: %w", taskID, err)
	}
	return res, nil
}

// settleRowsSQL moves the rows of a settlement ($1 ids in id order, $2
// their claim tokens, $3 outcomes, $4 errors) out of replaying and returns
// the status moves, for the counters. TestSettlementReachesRowsByKey holds
// its plan to primary-key probes.
const settleRowsSQL = `
WITH o AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS o(id, tok, kind, err)
), l AS MATERIALIZED (
    -- The outcomes whose row is still claimed by their token, each found
    -- by one primary-key probe, in id order (outs are sorted);
    -- materialized, so that the update below is planned from its result
    -- and not folded into one join the planner may start from
    -- dead_messages. The status and the owner are written so
    -- that no index can serve them: dead_messages_claim_owner (which holds
    -- only replaying rows, and whose statistics see none) looked as cheap
    -- as the primary key, and a probe through it reads every row of the
    -- claim, 500 times per settlement; joined the other way, the planner
    -- walked every replaying row of every claim in flight.
    SELECT o.id, o.tok, o.kind, o.err FROM o
    CROSS JOIN LATERAL (
        SELECT 1 FROM dead_messages d
        WHERE d.id = o.id AND (d.status || '') = 'replaying' AND (d.claim_owner || '') = o.tok
        LIMIT 1) d -- kept a probe: pulled up into a join, it read the whole table
), u AS (
    -- The update fences itself: if a row changed since the probe, it
    -- waits for that change, re-reads the row's latest version, and the
    -- status and owner conditions leave it alone if it died again or its
    -- claim was taken back. No separate row lock is needed, which saved
    -- a lock record per row.
    UPDATE dead_messages m SET
        status = CASE WHEN l.kind = 'published' THEN 'replayed' ELSE 'pending' END,
        replayed_at = CASE WHEN l.kind = 'published' THEN now() ELSE m.replayed_at END,
        replay_count = CASE WHEN l.kind = 'published' THEN m.replay_count + 1 ELSE m.replay_count END,
        last_replay_at = CASE WHEN l.kind = 'released' THEN m.last_replay_at ELSE now() END,
        last_replay_error = CASE WHEN l.kind = 'published' THEN NULL
                                 WHEN l.kind = 'released' THEN m.last_replay_error
                                 ELSE l.err END,
        claim_owner = NULL, claim_expires_at = NULL, status_changed_at = now()
    FROM l WHERE m.id = l.id AND (m.status || '') = 'replaying' AND (m.claim_owner || '') = l.tok
    RETURNING m.source_queue, coalesce(m.group_id, 0) AS group_id, m.status, m.body_size
)
SELECT source_queue, group_id, 'replaying', status, count(*), coalesce(sum(body_size), 0)::bigint
FROM u GROUP BY 1, 2, 4`

// UnknownOutcomeLeaseExpired is recorded on a message whose claim was taken
// back after its lease while it may have been published: its holder
// stopped (crash, kill, partition) after handing it to the broker, and
// whether the broker took it is not known.
const UnknownOutcomeLeaseExpired = "outcome unknown: the replaying process stopped before recording whether the broker confirmed this message (claim lease expired); it may have been delivered"

// RecoverExpiredReplayClaims takes back at most limit claimed rows whose
// lease ran out (the row's first lease and its claim's renewed one). A row its holder may have published (at or below the
// claim's write-ahead mark) goes back to pending with
// UnknownOutcomeLeaseExpired and its item is settled as unknown, so its
// task never publishes it again on its own (no duplicate by dlq; an
// operator may replay it). A row above the mark was never published: it
// goes back to pending untouched and stays to do for its task. It returns
// how many rows it took back and how many of them had an unknown outcome.
func (s *Store) RecoverExpiredReplayClaims(ctx context.Context, limit int) (taken, unknown int64, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("store: begin claim recovery: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, `
WITH e AS (
    SELECT m.id, m.claim_owner, coalesce(m.id <= c.through_id, false) AS maybe
    FROM dead_messages m
    LEFT JOIN replay_claims c ON c.token = m.claim_owner
    WHERE m.status = 'replaying' AND (m.claim_expires_at IS NULL OR m.claim_expires_at < now())
      AND (c.token IS NULL OR c.expires_at < now())
    ORDER BY m.id LIMIT $1
    FOR UPDATE OF m SKIP LOCKED
)
UPDATE dead_messages m SET status = 'pending',
    last_replay_error = CASE WHEN e.maybe THEN $2 ELSE m.last_replay_error END,
    last_replay_at = CASE WHEN e.maybe THEN now() ELSE m.last_replay_at END,
    claim_owner = NULL, claim_expires_at = NULL, status_changed_at = now()
FROM e WHERE m.id = e.id
RETURNING m.id, coalesce(m.replay_task_id, 0), m.source_queue, coalesce(m.group_id, 0), m.body_size, e.maybe, e.claim_owner`,
		limit, UnknownOutcomeLeaseExpired)
	if err != nil {
		return 0, 0, fmt.Errorf("store: recover expired replay claims: %w", err)
	}
	var (
		taskIDs, msgIDs []int64
		released        = map[int64]int64{}
		tokens          = map[string]bool{}
		moves           = map[moveKey]*StatusMove{}
	)
	for rows.Next() {
		var id, task, group, size int64
		var queue string
		var maybe bool
		var token *string
		if err := rows.Scan(&id, &task, &queue, &group, &size, &maybe, &token); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("store: recover expired replay claims: %w", err)
		}
		taken++
		if token != nil {
			tokens[*token] = true
		}
		switch {
		case task > 0 && maybe:
			unknown++
			taskIDs = append(taskIDs, task)
			msgIDs = append(msgIDs, id)
		case task > 0:
			released[task]++
		}
		k := moveKey{queue, group}
		mv := moves[k]
		if mv == nil {
			mv = &StatusMove{Queue: queue, Group: group, From: StatusReplaying, To: StatusPending}
			moves[k] = mv
		}
		mv.Messages++
		mv.Bytes += size
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("store: recover expired replay claims: %w", err)
	}
	if taken == 0 {
		return 0, 0, nil
	}
	if len(msgIDs) > 0 {
		_, err = tx.Exec(ctx, `
WITH s AS (
    UPDATE replay_task_items i SET outcome = 'unknown', detail = $3
    FROM unnest($1::bigint[], $2::bigint[]) AS o(task_id, id)
    WHERE i.task_id = o.task_id AND i.message_id = o.id AND i.outcome IS NULL
    RETURNING i.task_id
), c AS (SELECT task_id, count(*) AS n FROM s GROUP BY task_id ORDER BY task_id)
UPDATE replay_tasks t SET unknown = t.unknown + c.n, updated_at = now()
FROM c WHERE t.id = c.task_id`, taskIDs, msgIDs, UnknownOutcomeLeaseExpired)
		if err != nil {
			return 0, 0, fmt.Errorf("store: settle recovered replay claims: %w", err)
		}
	}
	if len(released) > 0 {
		ids := slices.Sorted(maps.Keys(released))
		counts := make([]int64, len(ids))
		for i, id := range ids {
			counts[i] = released[id]
		}
		_, err = tx.Exec(ctx, `
UPDATE replay_tasks t SET claimed = t.claimed - c.n, updated_at = now()
FROM unnest($1::bigint[], $2::bigint[]) AS c(id, n) WHERE t.id = c.id`, ids, counts)
		if err != nil {
			return 0, 0, fmt.Errorf("store: hand back recovered replay claims: %w", err)
		}
	}
	list := make([]StatusMove, 0, len(moves))
	for _, m := range moves {
		list = append(list, *m)
	}
	if err := applyStatusDeltas(ctx, tx, list); err != nil {
		return 0, 0, fmt.Errorf("store: recover expired replay claims: %w", err)
	}
	// A claim's mark goes once none of its rows is replaying any more.
	toks := make([]string, 0, len(tokens))
	for t := range tokens {
		toks = append(toks, t)
	}
	_, err = tx.Exec(ctx, `
DELETE FROM replay_claims c WHERE c.token = ANY($1)
  AND NOT EXISTS (SELECT 1 FROM dead_messages m WHERE m.status = 'replaying' AND m.claim_owner = c.token)`, toks)
	if err != nil {
		return 0, 0, fmt.Errorf("store: drop marks of recovered replay claims: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("store: commit claim recovery: %w", err)
	}
	return taken, unknown, nil
}

// ReplayItemsLeft counts a task's unsettled items; inFlight is how many of
// them are being replayed right now (under any claim).
func (s *Store) ReplayItemsLeft(ctx context.Context, taskID int64) (left, inFlight int64, err error) {
	err = s.pool.QueryRow(ctx, `
SELECT count(*), count(*) FILTER (WHERE m.status = 'replaying')
FROM replay_task_items i LEFT JOIN dead_messages m ON m.id = i.message_id
WHERE i.task_id = $1 AND i.outcome IS NULL`, taskID).Scan(&left, &inFlight)
	if err != nil {
		return 0, 0, fmt.Errorf("store: count unsettled items of replay task %d: %w", taskID, err)
	}
	return left, inFlight, nil
}

// SkipDeletedReplayItems settles as skipped the unsettled items of a task
// whose message no longer exists.
func (s *Store) SkipDeletedReplayItems(ctx context.Context, taskID int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `
WITH s AS (
    UPDATE replay_task_items i SET outcome = 'skipped', detail = 'deleted before it was replayed'
    WHERE i.task_id = $1 AND i.outcome IS NULL
      AND NOT EXISTS (SELECT 1 FROM dead_messages m WHERE m.id = i.message_id)
    RETURNING 1
), c AS (SELECT count(*) AS n FROM s)
UPDATE replay_tasks t SET skipped = t.skipped + c.n, updated_at = now()
FROM c WHERE t.id = $1
RETURNING c.n`, taskID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: skip deleted items of replay task %d: %w", taskID, err)
	}
	return n, nil
}

// CanaryDiedAgain returns the canary messages of a task that died again:
// their row's last death carries the x-dlq-replay-id the canary published
// them with (recorded as the item's detail, see ReplayOutcome.ReplayID).
// Another copy of the same message dying — an earlier replay of it, or the
// application's own — does not count. Canary items recorded without a
// replay id (by an older version) fall back to the row: pending again with
// a failure time after the canary started.
func (s *Store) CanaryDiedAgain(ctx context.Context, taskID int64) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `
SELECT m.id FROM replay_tasks t
JOIN replay_task_items i ON i.task_id = t.id AND i.message_id = ANY(t.canary_ids)
JOIN dead_messages m ON m.id = i.message_id
WHERE t.id = $1 AND CASE WHEN i.detail IS NOT NULL THEN m.last_death_replay_id = i.detail
                         ELSE m.status = 'pending' AND m.failed_at >= t.canary_started_at END
ORDER BY m.id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("store: check canary of replay task %d: %w", taskID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("store: check canary of replay task %d: %w", taskID, err)
	}
	return ids, nil
}

func nonNilIDs(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
