package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replay task leases: which runner holds a task (replay_tasks.runner_owner),
// its renewal and release, and the task's progress writes. The claims of
// its messages are in replay_claims.go.

// ErrReplayLeaseLost means the caller no longer holds the task it names.
var ErrReplayLeaseLost = errors.New("replay task lease lost")

// AcquireReplayTask gives owner one task that is due and that no live
// runner holds, for lease; ok is false when there is none. SKIP LOCKED
// lets instances look at the same time without waiting for each other.
func (s *Store) AcquireReplayTask(ctx context.Context, owner string, lease time.Duration, exclude []int64) (ReplayTask, bool, error) {
	t, err := scanReplayTask(s.pool.QueryRow(ctx, `
UPDATE replay_tasks SET runner_owner = $1, runner_expires_at = now() + $2 * interval '1 millisecond',
    status = CASE WHEN status = 'scheduled' THEN 'running' ELSE status END,
    started_at = coalesce(started_at, now()), updated_at = now(),
    -- Counted, so that the database tells this version's runners from an
    -- earlier version's, which must not run an edit-then-replay task
    -- (migration 00081).
    acquisitions = acquisitions + 1
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
// take it at any moment, and may have already. Recovery revokes a claim on
// the same row before it takes the claim's rows (revokeLapsedClaims), so a
// renewal that waits for that row's lock, having begun before the lease
// ran out, re-reads it once recovery's revoke commits and renews nothing;
// one that gets there first extends the claim, and recovery passes it
// over. A
// renewal extends a claim from when its statement began (now()): one that
// waited for the row so long that this lease, too, has run out when it
// writes reports the claim lost, since recovery may take it once the
// renewal commits. The two updates are separate statements: neither waits
// for the other's locks, so a renewal can never deadlock with a
// settlement.
func (s *Store) RenewReplayLease(ctx context.Context, taskID int64, owner string, tokens []string, lease time.Duration) (status string, renewed []string, err error) {
	if len(tokens) > 0 {
		if renewed, err = s.renewClaims(ctx, taskID, tokens, lease); err != nil {
			return "", nil, err
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

// renewClaims extends the claims named by tokens that are still held,
// and returns those it extended (RenewReplayLease).
func (s *Store) renewClaims(ctx context.Context, taskID int64, tokens []string, lease time.Duration) ([]string, error) {
	// RETURNING is computed once the row is written, after any wait for its
	// lock: clock_timestamp() is then later than the wait, unlike now().
	rows, err := s.pool.Query(ctx, `
UPDATE replay_claims SET expires_at = now() + $2 * interval '1 millisecond'
WHERE token = ANY($1) AND expires_at > now()
RETURNING token, expires_at > clock_timestamp()`, tokens, lease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("store: renew claims of replay task %d: %w", taskID, err)
	}
	defer rows.Close()
	var renewed []string
	for rows.Next() {
		var token string
		var held bool
		if err := rows.Scan(&token, &held); err != nil {
			return nil, fmt.Errorf("store: renew claims of replay task %d: %w", taskID, err)
		}
		if held {
			renewed = append(renewed, token)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: renew claims of replay task %d: %w", taskID, err)
	}
	return renewed, nil
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
	// Canary adds the items the claim settles as published (Returned) to
	// the task's canary set, as a canary's settlement does.
	Canary bool
}
