package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Automatic replay policies (the cron job "policies"): the store's part is
// picking the messages whose next attempt is due, recording each attempt
// with its replay task in one transaction under the job's lease, parking
// the messages a policy has tried as often as it may, and each policy's
// state (paused, its last dry run: policies_state.go).

// Audit actions of the policies.
const (
	ActionPolicyPark   = "policy_park"
	ActionPolicyPause  = "policy_pause"
	ActionPolicyResume = "policy_resume"
)

// ViaPolicy is the door of an automatic replay policy's actions: its
// replay tasks are created by policy:<name> via policy.
const ViaPolicy = "policy"

// PolicySelection is which messages a policy replays, and when.
type PolicySelection struct {
	// Name is the policy's name. Required.
	Name string
	// Queues, Reasons and Groups restrict the selection; empty means any.
	Queues  []string
	Reasons []string
	Groups  []int64
	// Categories restricts it to these failure categories. Required.
	Categories []string
	// The schedule: attempt k (from 1) is due
	// min(FirstDelay × BackoffFactor^(k-1), MaxDelay) × (1 ± Jitter) after
	// the message last failed, or after attempt k-1 if it did not die
	// again since (PolicyJitter says by how much, per message and attempt).
	FirstDelay, MaxDelay time.Duration
	BackoffFactor        float64
	Jitter               float64
	// MaxAttempts is how often the policy replays one message.
	MaxAttempts int
}

// PolicyJitter is the fraction, in [0, 1), that spreads the delay of
// attempt of message id: the delay is multiplied by
// 1 + jitter × (2 × PolicyJitter − 1). It is a function of the two numbers
// alone, so every instance computes the same due time, and the policies
// job's SQL computes exactly this.
func PolicyJitter(id int64, attempt int) float64 {
	return float64(((id%1000003)*7919+int64(attempt)*104729)%1000) / 1000
}

// actor is the name a policy acts under.
func (p PolicySelection) actor() string { return "policy:" + p.Name }

// scope is the scope a policy acts within, as its tasks and audit rows
// record it: nil, every queue, for a policy without queues. An empty list
// (queues: [] in the configuration) would be recorded as {}, which lies
// inside every scoped token's queues (AuditWithin).
func (p PolicySelection) scope() []string {
	if len(p.Queues) == 0 {
		return nil
	}
	return p.Queues
}

// dueSQL renders the query of the messages whose next attempt is due:
// id and attempts made so far. It walks the failure groups the policy
// selects (queue, reason, category and group are the group's key), each
// through its (group_id, status, id) index.
func (p PolicySelection) dueSQL(args *sqlArgs) string {
	conds := []string{"g.pending > 0", "g.category = ANY(" + args.add(p.Categories) + "::text[])"}
	if len(p.Queues) > 0 {
		conds = append(conds, "g.source_queue = ANY("+args.add(p.Queues)+"::text[])")
	}
	if len(p.Reasons) > 0 {
		conds = append(conds, "g.reason = ANY("+args.add(p.Reasons)+"::text[])")
	}
	if len(p.Groups) > 0 {
		conds = append(conds, "g.id = ANY("+args.add(p.Groups)+"::bigint[])")
	}
	name := args.add(p.Name)
	n := "coalesce(a.attempts, 0)"
	delay := "least(" + args.add(p.FirstDelay.Seconds()) + "::float8 * power(" + args.add(p.BackoffFactor) + "::float8, " + n + "), " +
		args.add(p.MaxDelay.Seconds()) + "::float8) * (1 + " + args.add(p.Jitter) + "::float8 * (2 * " +
		"(((m.id % 1000003) * 7919 + (" + n + " + 1) * 104729) % 1000) / 1000.0 - 1))"
	return `SELECT m.id, ` + n + ` AS attempts
FROM failure_groups g
CROSS JOIN LATERAL (
    SELECT m.id, m.failed_at FROM dead_messages m
    WHERE m.group_id = g.id AND ` + statusIn("m", []string{StatusPending}) + ` AND NOT m.auto_exhausted) m
LEFT JOIN policy_attempts a ON a.policy = ` + name + ` AND a.message_id = m.id
WHERE ` + joinAnd(conds) + `
  AND ` + n + ` < ` + args.add(p.MaxAttempts) + `
  AND greatest(m.failed_at, a.last_attempt_at) + ` + delay + ` * interval '1 second' <= now()`
}

func joinAnd(conds []string) string {
	out := conds[0]
	for _, c := range conds[1:] {
		out += " AND " + c
	}
	return out
}

// liveTaskSQL is true while a replay task of the policy ($1: its actor,
// $2: its name) is not finished, or one stopped by its canary has not been
// looked at yet (PauseOnCanary, at the policy's next run, pauses it and
// gives back the attempts it did not make).
const liveTaskSQL = `EXISTS (SELECT 1 FROM replay_tasks t WHERE t.created_by = $1 AND t.created_via = 'policy'
    AND (t.status IN ('scheduled', 'running', 'canary_wait')
      OR (t.status = 'canary_failed' AND t.id > coalesce((SELECT checked_task_id FROM policy_state WHERE name = $2), 0))))`

// PolicyAttempt is one attempt of a policy: a replay task of the messages
// whose next attempt is due.
type PolicyAttempt struct {
	Selection PolicySelection
	// Limit is the most messages one attempt's task takes (the oldest
	// first); the rest wait for the next run. Required.
	Limit int64
	// Request is the task's request in its public JSON form. Required.
	Request       json.RawMessage
	RatePerSecond float64
	CanaryCount   int
	CanaryWait    time.Duration
	// UnknownRetries is the task's (NewReplayTask.UnknownRetries).
	UnknownRetries int
}

// PolicyAttemptResult is what StartPolicyAttempt did.
type PolicyAttemptResult struct {
	// Task is the attempt's replay task; nil when nothing was due or a
	// task of the policy is still running (Busy).
	Task *ReplayTask
	Busy bool
	// Attempts counts the task's messages by the attempt it is for them
	// (1 for a first attempt).
	Attempts map[int]int64
}

// StartPolicyAttempt records, under l, one replay task of the messages
// whose next attempt by the policy is due, and counts the attempt for each
// of them, in one transaction: an attempt is made once, whichever instance
// runs the job, and a run that lost its lease records nothing. While a
// task of the policy is unfinished nothing is started (Busy): one task at
// a time keeps the policy's rate, and its messages, still pending until
// it reaches them, are not tried again meanwhile.
func (s *Store) StartPolicyAttempt(ctx context.Context, l Lease, a PolicyAttempt) (PolicyAttemptResult, error) {
	p := a.Selection
	var res PolicyAttemptResult
	errNothing := errors.New("nothing due")
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT `+liveTaskSQL, p.actor(), p.Name).Scan(&res.Busy); err != nil {
			return fmt.Errorf("look for a running task: %w", err)
		}
		if res.Busy {
			return errNothing
		}
		n := NewReplayTask{
			Selection: Filter{Scope: p.scope()}, MaxItems: a.Limit, Limit: a.Limit, Request: a.Request,
			RatePerSecond: a.RatePerSecond, CanaryCount: a.CanaryCount, CanaryWait: a.CanaryWait,
			UnknownRetries: a.UnknownRetries,
			Actor:          Actor{Name: p.actor(), Role: "operator", Via: ViaPolicy, Scope: p.scope()},
			AuditSelection: map[string]any{"policy": p.Name},
		}
		id, err := s.insertReplayTask(ctx, tx, n)
		if err != nil {
			return err
		}
		args := sqlArgs{id}
		rows, err := tx.Query(ctx, `
WITH due AS (`+p.dueSQL(&args)+`
    ORDER BY m.id LIMIT `+args.add(a.Limit)+`
), items AS (
    INSERT INTO replay_task_items (task_id, message_id) SELECT $1, due.id FROM due
)
INSERT INTO policy_attempts AS pa (policy, message_id, attempts, last_task_id, last_attempt_at)
SELECT `+args.add(p.Name)+`, due.id, due.attempts + 1, $1, now() FROM due
ON CONFLICT (policy, message_id) DO UPDATE SET attempts = EXCLUDED.attempts,
    last_task_id = EXCLUDED.last_task_id, last_attempt_at = EXCLUDED.last_attempt_at
RETURNING attempts`, args...)
		if err != nil {
			return fmt.Errorf("select the due messages: %w", err)
		}
		res.Attempts = map[int]int64{}
		var total int64
		for rows.Next() {
			var k int
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return err
			}
			res.Attempts[k]++
			total++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("select the due messages: %w", err)
		}
		if total == 0 {
			return errNothing
		}
		byAttempt := map[string]int64{}
		for k, c := range res.Attempts {
			byAttempt[strconv.Itoa(k)] = c
		}
		t, err := finishReplayTask(ctx, tx, n, id, total, ActionReplay, map[string]any{"policy": p.Name, "attempts": byAttempt})
		if err != nil {
			return err
		}
		res.Task = &t
		return nil
	})
	switch {
	case errors.Is(err, errNothing):
		return PolicyAttemptResult{Busy: res.Busy}, nil
	case err != nil:
		return PolicyAttemptResult{}, fmt.Errorf("store: attempt of policy %s: %w", p.Name, err)
	}
	return res, nil
}

// ParkExhausted flags, under l, the pending messages the policy has tried
// MaxAttempts times (and that died again, or were never delivered):
// auto_exhausted, so no policy tries them again, with one audit row. It
// returns how many it parked per source queue. Nothing is parked while a
// task of the policy runs: its messages may still be on their way.
func (s *Store) ParkExhausted(ctx context.Context, l Lease, p PolicySelection) (map[string]int64, error) {
	out := map[string]int64{}
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		var busy bool
		if err := tx.QueryRow(ctx, `SELECT `+liveTaskSQL, p.actor(), p.Name).Scan(&busy); err != nil || busy {
			return err
		}
		rows, err := tx.Query(ctx, `
WITH parked AS (
    DELETE FROM policy_attempts a USING dead_messages m
    WHERE a.policy = $1 AND a.attempts >= $2 AND m.id = a.message_id
      AND m.status = 'pending' AND NOT m.auto_exhausted
    RETURNING a.message_id
), flagged AS (
    UPDATE dead_messages m SET auto_exhausted = true FROM parked
    WHERE m.id = parked.message_id RETURNING m.source_queue
)
SELECT source_queue, count(*) FROM flagged GROUP BY 1 ORDER BY 1`, p.Name, p.MaxAttempts)
		if err != nil {
			return err
		}
		var total int64
		for rows.Next() {
			var q string
			var n int64
			if err := rows.Scan(&q, &n); err != nil {
				rows.Close()
				return err
			}
			out[q] = n
			total += n
		}
		rows.Close()
		if err := rows.Err(); err != nil || total == 0 {
			return err
		}
		return insertAudit(ctx, tx, Actor{Name: p.actor(), Role: "operator", Via: ViaPolicy, Scope: p.scope()}, ActionPolicyPark,
			map[string]any{"policy": p.Name}, total, map[string]any{"max_attempts": p.MaxAttempts, "by_source_queue": out})
	})
	if err != nil {
		return nil, fmt.Errorf("store: park messages of policy %s: %w", p.Name, err)
	}
	return out, nil
}

// ForgetPolicyAttempts deletes, under l, up to limit attempt counts whose
// message is gone or acknowledged: nothing will try those again. Counts of
// replayed messages stay, so that one dying again later goes on from its
// count rather than starting over.
func (s *Store) ForgetPolicyAttempts(ctx context.Context, l Lease, limit int) (int64, error) {
	var n int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM policy_attempts a WHERE (a.policy, a.message_id) IN (
    SELECT a.policy, a.message_id FROM policy_attempts a LEFT JOIN dead_messages m ON m.id = a.message_id
    WHERE m.id IS NULL OR m.status = 'acknowledged' LIMIT $1)`, limit)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: forget policy attempts: %w", err)
	}
	return n, nil
}

// PendingApproval is a request waiting for approval, as the alert job
// sees it.
type PendingApproval struct {
	ID          int64
	Action      string
	Count       int64
	RequestedBy string
	ExpiresAt   time.Time
}

// PendingApprovals lists the requests that wait for a decision and have
// not expired, oldest first.
func (s *Store) PendingApprovals(ctx context.Context) ([]PendingApproval, error) {
	rows, err := s.pool.Query(ctx, `
SELECT id, action, count, requested_by, expires_at FROM approvals
WHERE status = 'pending' AND expires_at > now() ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: list pending approvals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingApproval, error) {
		var a PendingApproval
		err := r.Scan(&a.ID, &a.Action, &a.Count, &a.RequestedBy, &a.ExpiresAt)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list pending approvals: %w", err)
	}
	return out, nil
}
