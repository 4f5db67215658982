package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Taking back claims whose lease ran out, and what a task has left to do.

// UnknownOutcomeLeaseExpired is recorded on a message whose claim was taken
// back after its lease while it may have been published: its holder
// stopped (crash, kill, partition) after handing it to the broker, and
// whether the broker took it is not known.
const UnknownOutcomeLeaseExpired = "outcome unknown: the replaying process stopped before recording whether the broker confirmed this message (claim lease expired); it may have been delivered"

// RecoveredClaims is what one RecoverExpiredReplayClaims call did.
type RecoveredClaims struct {
	// Taken rows went back to pending.
	Taken int64
	// Unknown items were settled as unknown: their holder may have
	// published them, and their task does not send them again (or their
	// task stopped while they waited to be sent again after an earlier
	// unknown outcome).
	Unknown int64
	// Retried items may have been published too, and wait to be sent again
	// by their task (within its unknown_retries).
	Retried int64
	// Republished of those (Unknown and Retried) were publishes sent again
	// after an earlier unknown outcome.
	Republished int64
}

// RecoverExpiredReplayClaims takes back at most limit claimed rows whose
// lease ran out (the row's first lease and its claim's renewed one). A row
// its holder may have published (at or below the claim's write-ahead mark)
// goes back to pending with UnknownOutcomeLeaseExpired. Its item stays
// unsettled, its unknown count one higher, when its task sends unknown
// outcomes again and has not done so unknown_retries times for it yet
// (whichever runner resumes the task publishes it again); otherwise it is
// settled as unknown, and its task never publishes it again on its own (no
// duplicate by dlq; an operator may replay it). A row above the mark was
// never published: it goes back to pending untouched and stays to do for
// its task (unless that task stopped and the row was being sent again
// after an earlier unknown outcome: its item is then unknown).
//
// Only the rows of claims it revoked first (revokeLapsedClaims), or of
// claims without a replay_claims row, are taken: a claim is taken back
// only once no renewal can extend it any more.
func (s *Store) RecoverExpiredReplayClaims(ctx context.Context, limit int) (RecoveredClaims, error) {
	var res RecoveredClaims
	if err := s.revokeLapsedClaims(ctx); err != nil {
		return res, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("store: begin claim recovery: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	t, err := takeExpiredClaims(ctx, tx, limit)
	if err != nil || t.taken == 0 {
		return res, err
	}
	res.Taken = t.taken
	settled, err := settleTakenItems(ctx, tx, t, &res)
	if err != nil {
		return res, err
	}
	if err := recountTakenTasks(ctx, tx, t.left, settled); err != nil {
		return res, err
	}
	list := make([]StatusMove, 0, len(t.moves))
	for _, m := range t.moves {
		list = append(list, *m)
	}
	if err := applyStatusDeltas(ctx, tx, list); err != nil {
		return res, fmt.Errorf("store: recover expired replay claims: %w", err)
	}
	if err := dropSpentClaimMarks(ctx, tx, t.tokens); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("store: commit claim recovery: %w", err)
	}
	return res, nil
}

// revokedClaim is the expiry a revoked claim has: before every time, so
// that no renewal extends it (RenewReplayLease renews only a claim that
// expires after its now()), and recovery tells it from a claim that merely
// lapsed.
const revokedClaim = "'-infinity'::timestamptz"

// revokeLapsedClaims revokes the claims whose lease ran out, in a
// statement of its own that commits before recovery looks at their rows.
// Recovery that read the lease without the row's lock took rows back from
// under a renewal that then succeeded: the holder published on, and the
// rows above its mark went back to the task as never published, to be
// sent again.
//
// A claim is renewed (RenewReplayLease) and revoked on its replay_claims
// row, so the two take its row lock one after the other: a renewal that
// began before the lease ran out and commits while recovery looks (it
// waited for the row's lock behind a mark or a settlement, or for a slow
// commit) either holds the row or has extended the claim, and the revoke
// leaves it, or comes second, re-reads the row revoked, and renews nothing
// (the claim is lost to its holder). A renewal
// extends a claim to its own now() plus the lease; if even that has passed
// when the revoke re-reads it, the revoke goes ahead: the renewal reports
// the claim lost if that lease had run out when it wrote, and otherwise
// (its commit was slow) the holder, whose fence ends a quarter of a lease
// before that lease does (replay's stillHeld), publishes nothing more from
// it.
//
// A claim whose row another transaction holds (a renewal under way, a
// mark, a settlement ending the claim) is passed over, and looked at again
// on the next pass: the revoke never waits, holding some claims, for
// others, and so takes part in no deadlock, whatever order other writers
// of several claims take them in. Recovery's own transaction, which locks
// message rows and tasks, takes no replay_claims lock before its last
// step (store/doc.go, "Lock order").
func (s *Store) revokeLapsedClaims(ctx context.Context) error {
	// The locking read re-reads a row committed since the statement began
	// (a renewal) and checks the lease on it again.
	if _, err := s.pool.Exec(ctx, `
UPDATE replay_claims SET expires_at = `+revokedClaim+`
WHERE token IN (
    SELECT token FROM replay_claims
    WHERE expires_at < now() AND expires_at > `+revokedClaim+`
    FOR UPDATE SKIP LOCKED)`); err != nil {
		return fmt.Errorf("store: revoke lapsed replay claims: %w", err)
	}
	return nil
}

// takenClaims are the rows recovery took back from expired claims.
type takenClaims struct {
	taken int64
	// taskIDs, msgIDs, counts (the replay_count the copies carried) and
	// maybe (a copy may have been published: the item's outcome is
	// unknown) name the rows of tasks (settleTakenItems).
	taskIDs, msgIDs, counts []int64
	maybe                   []bool
	// left counts, per task, the rows taken back (all of them, whether a
	// copy may have been published or not): each leaves its task's claimed
	// count as it leaves replaying (recountTakenTasks).
	left   map[int64]int64
	tokens map[string]bool // the claims the rows were under
	moves  map[moveKey]*StatusMove
}

// takeExpiredClaims sets the replaying rows of revoked claims back to
// pending (up to limit, passing over rows another transaction holds),
// marking those a copy of which may have been published. A claim that
// lapsed after revokeLapsedClaims looked is left to the next pass: a
// renewal may still be on its way to it.
func takeExpiredClaims(ctx context.Context, tx pgx.Tx, limit int) (takenClaims, error) {
	rows, err := tx.Query(ctx, `
WITH e AS (
    SELECT m.id, m.claim_owner, coalesce(m.id <= c.through_id, false) AS maybe
    FROM dead_messages m
    LEFT JOIN replay_claims c ON c.token = m.claim_owner
    WHERE m.status = 'replaying' AND (m.claim_expires_at IS NULL OR m.claim_expires_at < now())
      AND (c.token IS NULL OR c.expires_at = `+revokedClaim+`)
    ORDER BY m.id LIMIT $1
    FOR NO KEY UPDATE OF m SKIP LOCKED
)
UPDATE dead_messages m SET status = 'pending',
    last_replay_error = CASE WHEN e.maybe THEN $2 ELSE m.last_replay_error END,
    last_replay_at = CASE WHEN e.maybe THEN now() ELSE m.last_replay_at END,
    claim_owner = NULL, claim_expires_at = NULL, status_changed_at = now()
FROM e WHERE m.id = e.id
RETURNING m.id, coalesce(m.replay_task_id, 0), m.source_queue, coalesce(m.group_id, 0), m.body_size, e.maybe, e.claim_owner,
    m.replay_count`,
		limit, UnknownOutcomeLeaseExpired)
	if err != nil {
		return takenClaims{}, fmt.Errorf("store: recover expired replay claims: %w", err)
	}
	t := takenClaims{left: map[int64]int64{}, tokens: map[string]bool{}, moves: map[moveKey]*StatusMove{}}
	for rows.Next() {
		var id, task, group, size, replays int64
		var queue string
		var maybe bool
		var token *string
		if err := rows.Scan(&id, &task, &queue, &group, &size, &maybe, &token, &replays); err != nil {
			rows.Close()
			return takenClaims{}, fmt.Errorf("store: recover expired replay claims: %w", err)
		}
		t.taken++
		if token != nil {
			t.tokens[*token] = true
		}
		if task > 0 {
			t.left[task]++
			t.taskIDs = append(t.taskIDs, task)
			t.msgIDs = append(t.msgIDs, id)
			// Its copies carried replay_count + 1: the row is still as the
			// claim left it (a copy that died and came back would have
			// taken it out of replaying).
			t.counts = append(t.counts, replays+1)
			t.maybe = append(t.maybe, maybe)
		}
		k := moveKey{queue, group}
		mv := t.moves[k]
		if mv == nil {
			mv = &StatusMove{Queue: queue, Group: group, From: StatusReplaying, To: StatusPending}
			t.moves[k] = mv
		}
		mv.Messages++
		mv.Bytes += size
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return takenClaims{}, fmt.Errorf("store: recover expired replay claims: %w", err)
	}
	return t, nil
}

// settledTaken is what settleTakenItems did to one task's
// items: unknown joined its unknown (and claimed) counts, republished its
// republished count.
type settledTaken struct{ unknown, republished int64 }

// settleTakenItems settles the items of the rows a copy of which may
// have been published: a task still running sends the message again while
// it has retries left for it (retried, republished: sent more than once);
// otherwise the outcome is unknown. A row never published goes back to its
// task untouched, unless the task has stopped and its item waited to be
// sent again after an earlier unknown outcome: that item is unknown now
// (as SettleStoppedRetries settles it, which left it to this claim), or
// it would stay unsettled for ever. An item settled
// already (its publish confirmed by an earlier claim's late outcome, the
// row claimed again since) is left alone, and so its row only leaves
// claimed. It counts into res and returns, per task, what its counters
// are to add (recountTakenTasks); it writes no task row, so that the
// tasks are locked once, all together, in the lock order.
func settleTakenItems(ctx context.Context, tx pgx.Tx, t takenClaims, res *RecoveredClaims) (map[int64]settledTaken, error) {
	if len(t.msgIDs) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
WITH o AS (
    SELECT o.task_id, o.id, o.copy, o.maybe,
           (t.status IN ('scheduled', 'running', 'canary_wait')) AS live, t.unknown_retries
    FROM unnest($1::bigint[], $2::bigint[], $4::bigint[], $5::bool[]) AS o(task_id, id, copy, maybe)
    JOIN replay_tasks t ON t.id = o.task_id
), s AS (
    UPDATE replay_task_items i SET
        outcome = CASE WHEN o.maybe AND o.live AND coalesce(i.unknown_count, 0) < o.unknown_retries THEN NULL ELSE 'unknown' END,
        detail = CASE WHEN NOT o.maybe THEN $6
                      WHEN o.live AND coalesce(i.unknown_count, 0) < o.unknown_retries THEN i.detail ELSE $3 END,
        unknown_count = CASE WHEN o.maybe THEN coalesce(i.unknown_count, 0) + 1 ELSE i.unknown_count END,
        copy_replay_count = CASE WHEN o.maybe THEN o.copy ELSE i.copy_replay_count END
    FROM o
    WHERE i.task_id = o.task_id AND i.message_id = o.id AND i.outcome IS NULL
      AND (o.maybe OR (NOT o.live AND i.unknown_count > 0))
    RETURNING i.task_id, i.outcome IS NULL AS retry, o.maybe AND i.unknown_count > 1 AS again
)
SELECT task_id, count(*) FILTER (WHERE NOT retry), count(*) FILTER (WHERE retry), count(*) FILTER (WHERE again)
FROM s GROUP BY task_id`,
		t.taskIDs, t.msgIDs, UnknownOutcomeLeaseExpired, t.counts, t.maybe, UnknownOutcomeNotSentAgain)
	if err != nil {
		return nil, fmt.Errorf("store: settle recovered replay claims: %w", err)
	}
	defer rows.Close()
	settled := map[int64]settledTaken{}
	for rows.Next() {
		var task, unknown, retried, republished int64
		if err := rows.Scan(&task, &unknown, &retried, &republished); err != nil {
			return nil, fmt.Errorf("store: settle recovered replay claims: %w", err)
		}
		settled[task] = settledTaken{unknown: unknown, republished: republished}
		res.Unknown += unknown
		res.Retried += retried
		res.Republished += republished
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: settle recovered replay claims: %w", err)
	}
	return settled, nil
}

// recountTakenTasks writes what recovery did to its tasks' counters. Each
// row taken back (left, per task) leaves its task's claimed count:
// claimed is the items claims settled and the rows being replayed, and
// these rows are replayed no more. Their items that are still unsettled
// are claimed again; those settled unknown (settled) join claimed, as a
// settlement's do (settleItemsSQL). The tasks are locked first, in id
// order (lockReplayTasksSQL): two recoveries, each holding some of the
// same tasks' rows, write several tasks each, and took them in different
// orders (the tasks with settled items first, then all of them).
func recountTakenTasks(ctx context.Context, tx pgx.Tx, left map[int64]int64, settled map[int64]settledTaken) error {
	if len(left) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(left))
	n, unknown, republished := make([]int64, len(ids)), make([]int64, len(ids)), make([]int64, len(ids))
	for i, id := range ids {
		n[i], unknown[i], republished[i] = left[id], settled[id].unknown, settled[id].republished
	}
	if _, err := tx.Exec(ctx, lockReplayTasksSQL, ids); err != nil {
		return fmt.Errorf("store: lock replay tasks %v of recovered claims: %w", ids, err)
	}
	_, err := tx.Exec(ctx, `
UPDATE replay_tasks t SET claimed = t.claimed - c.n + c.u, unknown = t.unknown + c.u,
    republished = t.republished + c.rp, updated_at = now()
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS c(id, n, u, rp) WHERE t.id = c.id`,
		ids, n, unknown, republished)
	if err != nil {
		return fmt.Errorf("store: hand back recovered replay claims of tasks %v: %w", ids, err)
	}
	return nil
}

// dropSpentClaimMarks deletes the write-ahead marks of the claims none
// of whose rows is replaying any more.
func dropSpentClaimMarks(ctx context.Context, tx pgx.Tx, tokens map[string]bool) error {
	// A claim's mark goes once none of its rows is replaying any more.
	toks := make([]string, 0, len(tokens))
	for t := range tokens {
		toks = append(toks, t)
	}
	_, err := tx.Exec(ctx, `
DELETE FROM replay_claims c WHERE c.token = ANY($1)
  AND NOT EXISTS (SELECT 1 FROM dead_messages m WHERE m.status = 'replaying' AND m.claim_owner = c.token)`, toks)
	if err != nil {
		return fmt.Errorf("store: drop marks of recovered replay claims: %w", err)
	}
	return nil
}

// UnknownOutcomeNotSentAgain is the item detail of a message whose
// publish had an unknown outcome and that its task, stopped before it sent
// it again, settles as unknown (SettleStoppedRetries).
const UnknownOutcomeNotSentAgain = "outcome unknown: the task stopped before sending it again; it may have been delivered"

// The rule for an item its task will not send (again): one that waits to
// be sent again after an unknown outcome (waitingItemSQL) is unknown,
// whatever became of its message (acknowledged, replayed elsewhere,
// deleted, stopped by the loop guard) or of its task (stopped): the copy
// sent first may have been delivered, and a skip would say nothing was.
// Any other is skipped: the task never sent it. The claim
// (ClaimReplayBatch), SkipDeletedReplayItems and SettleStoppedRetries
// (all of whose items wait) settle by it; replay_task_items is i.
const (
	waitingItemSQL  = `i.unknown_count > 0`
	notSentAgainSQL = `CASE WHEN ` + waitingItemSQL + ` THEN 'unknown' ELSE 'skipped' END`
)

// notSentAgain is the detail of an item that waited to be sent again and
// is unknown because cause (what became of its message) came first.
func notSentAgain(cause string) string {
	return "outcome unknown: " + cause + " before the task could send it again; it may have been delivered"
}

// UnknownOutcomeDeleted is the detail of an item that waited to be sent
// again after an unknown outcome when its message was deleted.
var UnknownOutcomeDeleted = notSentAgain("the message was deleted")

// SettleStoppedRetries settles as unknown the items of a finished task
// (cancelled, say) that wait to be sent again after an unknown outcome, so
// that its counters say what may have been delivered: whatever became of
// the message since (still pending, acknowledged, replayed or being
// replayed by another task, deleted), the task will not send it again, and
// the copy it sent may have been delivered. Only a message this task's
// last claim is sending again right now is left, to that claim's
// settlement (or, should its holder die, to claim recovery). The rows that
// still exist are locked first, in id order, so that a claim of this task
// cannot take one meanwhile. It returns how many it settled.
func (s *Store) SettleStoppedRetries(ctx context.Context, taskID int64) (int64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: begin settling the retries of replay task %d: %w", taskID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	// An item has no foreign key to its message (a deleted message's item
	// stays): the join finds the rows there are to lock.
	if _, err := tx.Exec(ctx, `
SELECT m.id FROM replay_task_items i
JOIN replay_tasks t ON t.id = i.task_id
JOIN dead_messages m ON m.id = i.message_id
WHERE i.task_id = $1 AND i.outcome IS NULL AND `+waitingItemSQL+`
  AND t.status IN ('completed', 'cancelled', 'failed', 'canary_failed')
ORDER BY m.id
FOR NO KEY UPDATE OF m`, taskID); err != nil {
		return 0, fmt.Errorf("store: lock the retries of replay task %d: %w", taskID, err)
	}
	var n int64
	err = tx.QueryRow(ctx, `
WITH s AS (
    UPDATE replay_task_items i SET outcome = 'unknown', detail = $2
    FROM replay_tasks t
    WHERE t.id = $1 AND t.status IN ('completed', 'cancelled', 'failed', 'canary_failed')
      AND i.task_id = $1 AND i.outcome IS NULL AND `+waitingItemSQL+`
      -- Read under the rows' locks: a row of this task's claim is settled
      -- with the claim.
      AND NOT EXISTS (SELECT 1 FROM dead_messages m
                      WHERE m.id = i.message_id AND m.status = 'replaying' AND m.replay_task_id = $1)
    RETURNING 1
), c AS (SELECT count(*) AS n FROM s)
-- Each joins claimed (the items claims settled and the rows being
-- replayed), which it had left when it was to be sent again.
UPDATE replay_tasks t SET unknown = t.unknown + c.n, claimed = t.claimed + c.n, updated_at = now()
FROM c WHERE t.id = $1 AND c.n > 0
RETURNING c.n`, taskID, UnknownOutcomeNotSentAgain).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: settle the retries of replay task %d: %w", taskID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("store: commit settling the retries of replay task %d: %w", taskID, err)
	}
	return n, nil
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

// ReplayAttempts counts the items of a task it tried to publish, by what
// became of them: published, failed, unknown (settled so), and waiting to
// be sent again after an unknown outcome or a nack (not settled yet).
// Skipped items were never tried, and items never claimed are not
// counted. A canary reads it: the canary is the first phase of its task,
// so every item tried so far is one of its messages, whichever runner
// tried it.
type ReplayAttempts struct {
	Published, Failed, Unknown, Waiting int64
}

// Tried is how many items were tried.
func (a ReplayAttempts) Tried() int64 { return a.Published + a.Failed + a.Unknown + a.Waiting }

// ReplayAttempts counts a task's items tried so far (ReplayAttempts). It
// reads every item of the task, as ReplayItemsLeft does.
func (s *Store) ReplayAttempts(ctx context.Context, taskID int64) (ReplayAttempts, error) {
	var a ReplayAttempts
	err := s.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE outcome = 'published'),
       count(*) FILTER (WHERE outcome = 'failed'),
       count(*) FILTER (WHERE outcome = 'unknown'),
       count(*) FILTER (WHERE outcome IS NULL AND unknown_count > 0)
FROM replay_task_items WHERE task_id = $1`, taskID).Scan(&a.Published, &a.Failed, &a.Unknown, &a.Waiting)
	if err != nil {
		return ReplayAttempts{}, fmt.Errorf("store: count the tried items of replay task %d: %w", taskID, err)
	}
	return a, nil
}

// SettledDeleted counts what SkipDeletedReplayItems settled.
type SettledDeleted struct {
	// Skipped items were never sent (SkipDeletedDetail).
	Skipped int64
	// Unknown items waited to be sent again after an unknown outcome: the
	// copy sent first may have been delivered (UnknownOutcomeDeleted).
	Unknown int64
}

// SkipDeletedReplayItems settles the unsettled items of a task whose
// message no longer exists: as skipped, or as unknown if they waited to be
// sent again (notSentAgainSQL).
func (s *Store) SkipDeletedReplayItems(ctx context.Context, taskID int64) (SettledDeleted, error) {
	var n SettledDeleted
	err := s.pool.QueryRow(ctx, `
WITH s AS (
    UPDATE replay_task_items i SET outcome = `+notSentAgainSQL+`,
        detail = CASE WHEN `+waitingItemSQL+` THEN $3 ELSE $2 END
    WHERE i.task_id = $1 AND i.outcome IS NULL
      AND NOT EXISTS (SELECT 1 FROM dead_messages m WHERE m.id = i.message_id)
    RETURNING i.outcome
), c AS (SELECT count(*) FILTER (WHERE outcome = 'skipped') AS s, count(*) FILTER (WHERE outcome = 'unknown') AS u FROM s)
-- An unknown one joins claimed (the items claims settled and the rows
-- being replayed), which it had left when it was to be sent again.
UPDATE replay_tasks t SET skipped = t.skipped + c.s, unknown = t.unknown + c.u, claimed = t.claimed + c.u,
    updated_at = now()
FROM c WHERE t.id = $1
RETURNING c.s, c.u`, taskID, SkipDeletedDetail, UnknownOutcomeDeleted).Scan(&n.Skipped, &n.Unknown)
	if err != nil {
		return SettledDeleted{}, fmt.Errorf("store: settle the items of deleted messages of replay task %d: %w", taskID, err)
	}
	return n, nil
}

// CanaryDiedAgain returns the canary messages of a task that died again:
// their row's last death carries an x-dlq-replay-id the canary published
// them with (recorded in the item's detail, see ReplayOutcome.ReplayID:
// every copy's, when one was sent again after an unknown outcome).
// Another copy of the same message dying — an earlier replay of it, or the
// application's own — does not count. Canary items recorded without a
// replay id (by an older version) fall back to the row: pending again with
// a failure time after the canary started.
func (s *Store) CanaryDiedAgain(ctx context.Context, taskID int64) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `
SELECT m.id FROM replay_tasks t
JOIN replay_task_items i ON i.task_id = t.id AND i.message_id = ANY(t.canary_ids)
JOIN dead_messages m ON m.id = i.message_id
WHERE t.id = $1 AND CASE WHEN i.detail IS NOT NULL THEN m.last_death_replay_id = ANY(string_to_array(i.detail, ' '))
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

func nonNilInt32s(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
