package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replay task statuses.
const (
	TaskScheduled    = "scheduled"     // waiting for its start time or a runner
	TaskRunning      = "running"       // being published
	TaskCanaryWait   = "canary_wait"   // canary published, waiting to see if any died again
	TaskCompleted    = "completed"     // every selected message settled
	TaskCancelled    = "cancelled"     // stopped by an operator
	TaskFailed       = "failed"        // stopped by an error it cannot get past
	TaskCanaryFailed = "canary_failed" // stopped because a canary message died again
)

// TaskFinished reports whether status is terminal.
func TaskFinished(status string) bool {
	switch status {
	case TaskCompleted, TaskCancelled, TaskFailed, TaskCanaryFailed:
		return true
	}
	return false
}

// Item outcomes of a replay task: each selected message is settled once.
const (
	OutcomePublished = "published" // the broker confirmed it (routed)
	OutcomeFailed    = "failed"    // not delivered: nack, unroutable, missing exchange, error
	OutcomeUnknown   = "unknown"   // may or may not have been delivered (lost confirm, dead holder)
	OutcomeSkipped   = "skipped"   // not attempted: loop guard, not pending, deleted
	// OutcomeReleased hands a claimed, never published message back
	// unsettled (shutdown, cancel, lease doubt): it is not an item outcome.
	OutcomeReleased = "released"
	// OutcomeRetry records an unknown outcome that the task sends again:
	// the row goes back to pending with the reason, and its item stays
	// unsettled, its unknown_count one higher. Not an item outcome either.
	OutcomeRetry = "retry"
)

// ErrEmptySelection means a replay selection matched no message.
var ErrEmptySelection = fmt.Errorf("%w: no message matches the selection", ErrNotFound)

// ErrSelectionTooLarge means a replay selection matched more messages than
// one task may hold.
var ErrSelectionTooLarge = errors.New("selection too large")

// ReplayTask is a replay task as stored.
type ReplayTask struct {
	ID                int64
	Status            string
	Request           json.RawMessage
	Scope             []string
	TargetExchange    *string
	TargetRoutingKey  *string
	RatePerSecond     float64
	Force             bool
	CanaryCount       int
	CanaryWaitSeconds int
	CanaryStartedAt   *time.Time
	CanaryUntil       *time.Time
	CanaryIDs         []int64
	CanaryPassed      bool
	Requested         int64
	Claimed           int64
	Published         int64
	Failed            int64
	Skipped           int64
	Unknown           int64
	Error             string
	CreatedBy         string
	CreatedRole       string
	CreatedVia        string
	RequestID         string
	CreatedAt         time.Time
	StartAt           time.Time
	StartedAt         *time.Time
	FinishedAt        *time.Time
	UpdatedAt         time.Time
	RunnerOwner       string
	RunnerExpiresAt   *time.Time
	// Edit is the edit an edit-then-replay task applies to its message
	// (package replay's form); nil for every other task.
	Edit json.RawMessage
	// ApprovalID is the approval request the task carried out, and
	// ApprovedBy the principal who approved it (CreatedBy is then its
	// requester); 0 and "" for a task that needed no approval.
	ApprovalID int64
	ApprovedBy string
	// RequestedAt is when the approval request the task carried out was
	// made (CreatedAt is then when it was approved: the task is created
	// by the approval); nil for a task that needed no approval.
	RequestedAt *time.Time
	// UnknownRetries is how often the task sends a message again whose
	// publish had an unknown outcome (0: never, on_unknown hold).
	UnknownRetries int
	// Republished counts the publishes the task sent again after an
	// unknown outcome, each once its outcome is recorded.
	Republished int64
}

// Remaining is how many selected messages are not settled yet.
func (t ReplayTask) Remaining() int64 {
	return max(t.Requested-t.Published-t.Failed-t.Skipped-t.Unknown, 0)
}

const replayTaskColumns = `id, status, request, scope, target_exchange, target_routing_key, rate_per_second, force,
    canary_count, canary_wait_seconds, canary_started_at, canary_until, canary_ids, canary_passed,
    requested, claimed, published, failed, skipped, unknown, coalesce(error, ''),
    created_by, created_role, created_via, request_id, created_at, start_at, started_at, finished_at, updated_at,
    coalesce(runner_owner, ''), runner_expires_at, edit, coalesce(approval_id, 0), coalesce(approved_by, ''),
    unknown_retries, republished,
    (SELECT a.created_at FROM approvals a WHERE a.id = replay_tasks.approval_id)`

func scanReplayTask(row pgx.Row) (ReplayTask, error) {
	var t ReplayTask
	err := row.Scan(&t.ID, &t.Status, &t.Request, &t.Scope, &t.TargetExchange, &t.TargetRoutingKey,
		&t.RatePerSecond, &t.Force, &t.CanaryCount, &t.CanaryWaitSeconds, &t.CanaryStartedAt, &t.CanaryUntil,
		&t.CanaryIDs, &t.CanaryPassed, &t.Requested, &t.Claimed, &t.Published, &t.Failed, &t.Skipped, &t.Unknown,
		&t.Error, &t.CreatedBy, &t.CreatedRole, &t.CreatedVia, &t.RequestID, &t.CreatedAt, &t.StartAt,
		&t.StartedAt, &t.FinishedAt, &t.UpdatedAt, &t.RunnerOwner, &t.RunnerExpiresAt, &t.Edit, &t.ApprovalID, &t.ApprovedBy,
		&t.UnknownRetries, &t.Republished, &t.RequestedAt)
	return t, err
}

// GetReplayTask returns one task, ErrNotFound when there is none.
func (s *Store) GetReplayTask(ctx context.Context, id int64) (ReplayTask, error) {
	t, err := scanReplayTask(s.pool.QueryRow(ctx, `SELECT `+replayTaskColumns+` FROM replay_tasks WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return ReplayTask{}, fmt.Errorf("replay task %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return ReplayTask{}, fmt.Errorf("store: get replay task %d: %w", id, err)
	}
	return t, nil
}

// ListReplayTasks returns tasks with an id below before (0: from the
// newest), newest first.
func (s *Store) ListReplayTasks(ctx context.Context, before int64, limit int) ([]ReplayTask, error) {
	return s.listReplayTasks(ctx, false, before, limit)
}

// ListUnfinishedReplayTasks is ListReplayTasks of the tasks not finished
// (scheduled, running, waiting on their canary), read through their
// partial index: however many tasks came after one, it is found.
func (s *Store) ListUnfinishedReplayTasks(ctx context.Context, before int64, limit int) ([]ReplayTask, error) {
	return s.listReplayTasks(ctx, true, before, limit)
}

func (s *Store) listReplayTasks(ctx context.Context, unfinished bool, before int64, limit int) ([]ReplayTask, error) {
	rows, err := s.pool.Query(ctx, `
SELECT `+replayTaskColumns+` FROM replay_tasks
WHERE ($2 = 0 OR id < $2) AND (NOT $3 OR status IN ('scheduled', 'running', 'canary_wait'))
ORDER BY id DESC LIMIT $1`, limit, before, unfinished)
	if err != nil {
		return nil, fmt.Errorf("store: list replay tasks: %w", err)
	}
	defer rows.Close()
	var out []ReplayTask
	for rows.Next() {
		t, err := scanReplayTask(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list replay tasks: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list replay tasks: %w", err)
	}
	return out, nil
}

// CancelReplayTask stops a task: its status becomes cancelled at once and
// its runner, wherever it runs, is told through a notification and stops
// before its next publish. allow, when set, is asked under the row lock
// whether the caller may cancel this task. Cancelling a cancelled task
// returns it unchanged; cancelling another finished task is ErrConflict.
func (s *Store) CancelReplayTask(ctx context.Context, id int64, actor Actor, allow func(ReplayTask) error) (ReplayTask, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ReplayTask{}, fmt.Errorf("store: begin cancel of replay task %d: %w", id, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	t, err := scanReplayTask(tx.QueryRow(ctx, `SELECT `+replayTaskColumns+` FROM replay_tasks WHERE id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return ReplayTask{}, fmt.Errorf("replay task %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return ReplayTask{}, fmt.Errorf("store: lock replay task %d: %w", id, err)
	}
	if allow != nil {
		if err := allow(t); err != nil {
			return ReplayTask{}, err
		}
	}
	switch {
	case t.Status == TaskCancelled:
		return t, nil
	case TaskFinished(t.Status):
		return t, fmt.Errorf("%w: replay task %d already finished (%s)", ErrConflict, id, t.Status)
	}
	t, err = scanReplayTask(tx.QueryRow(ctx, `
UPDATE replay_tasks SET status = 'cancelled', finished_at = now(), updated_at = now(),
    error = 'cancelled by ' || $2
WHERE id = $1 RETURNING `+replayTaskColumns, id, cleanText(actor.Name)))
	if err != nil {
		return ReplayTask{}, fmt.Errorf("store: cancel replay task %d: %w", id, err)
	}
	if err := insertAudit(ctx, tx, actor, ActionReplayCancel, map[string]int64{"task_id": id}, t.Remaining(),
		map[string]any{"task_id": id, "published": t.Published, "remaining": t.Remaining()}); err != nil {
		return ReplayTask{}, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('dlq_replay', current_schema() || ':cancel:' || $1::bigint::text)`, id); err != nil {
		return ReplayTask{}, fmt.Errorf("store: notify cancel of replay task %d: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return ReplayTask{}, fmt.Errorf("store: commit cancel of replay task %d: %w", id, err)
	}
	return t, nil
}

// ReplayEvent is a notification about a replay task, from any instance.
type ReplayEvent struct {
	// Kind is "start" or "cancel".
	Kind   string
	TaskID int64
}

// ListenReplayEvents holds one connection and calls fn for every task
// started or cancelled, by any instance sharing this database schema,
// until ctx ends or the connection fails (the caller listens again).
// Notifications carry the schema name, so instances in other schemas of
// the same database (tests, tenants) do not hear each other.
func (s *Store) ListenReplayEvents(ctx context.Context, ready func(), fn func(ReplayEvent)) error {
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: acquire connection to listen for replay events: %w", err)
	}
	// A connection that was LISTENing must not go back to the pool: take it
	// out and close it when done.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing a connection we drop
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("store: listen for replay events: %w", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN dlq_replay`); err != nil {
		return fmt.Errorf("store: listen for replay events: %w", err)
	}
	if ready != nil {
		ready()
	}
	prefix := schema + ":"
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("store: wait for replay events: %w", err)
		}
		rest, ok := strings.CutPrefix(n.Payload, prefix)
		if !ok {
			continue
		}
		kind, idText, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		var id int64
		if _, err := fmt.Sscan(idText, &id); err != nil {
			continue
		}
		fn(ReplayEvent{Kind: kind, TaskID: id})
	}
}
