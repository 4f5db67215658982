package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A policy's state (policies.go picks and records its attempts): its
// dry run, when it last ran, and whether it is paused, by an operator or
// by a canary that died again.

// PolicyPreview is what a policy would do now: a dry run.
type PolicyPreview struct {
	At time.Time `json:"at"`
	// Due would be replayed (at most the attempt limit), WouldPark parked.
	Due       int64 `json:"would_replay"`
	WouldPark int64 `json:"would_park"`
	// Sample holds the lowest ids that would be replayed.
	Sample []int64 `json:"sample"`
}

// PreviewPolicy counts what the policy would replay and park now, and
// changes nothing.
func (s *Store) PreviewPolicy(ctx context.Context, p PolicySelection, limit int64, sample int) (PolicyPreview, error) {
	var args sqlArgs
	due := p.dueSQL(&args)
	pv := PolicyPreview{Sample: []int64{}}
	err := s.pool.QueryRow(ctx, `
WITH due AS (`+due+` ORDER BY m.id LIMIT `+args.add(limit)+`)
SELECT now(), (SELECT count(*) FROM due), coalesce((SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM due ORDER BY id LIMIT `+args.add(sample)+`) s), '{}'),
    (SELECT count(*) FROM policy_attempts a JOIN dead_messages m ON m.id = a.message_id
     WHERE a.policy = `+args.add(p.Name)+` AND a.attempts >= `+args.add(p.MaxAttempts)+` AND m.status = 'pending' AND NOT m.auto_exhausted)`,
		args...).Scan(&pv.At, &pv.Due, &pv.Sample, &pv.WouldPark)
	if err != nil {
		return PolicyPreview{}, fmt.Errorf("store: preview policy %s: %w", p.Name, err)
	}
	pv.At = pv.At.UTC()
	return pv, nil
}

// PolicyState is what a policy is doing, beside its configuration.
type PolicyState struct {
	Paused       bool       `json:"paused"`
	PausedAt     *time.Time `json:"paused_at"`
	PausedBy     *string    `json:"paused_by"`
	PausedReason *string    `json:"paused_reason"`
	LastRunAt    *time.Time `json:"last_run_at"`
	// LastDryRun is the policy's latest dry run, while it is in dry-run
	// mode.
	LastDryRun *PolicyPreview `json:"last_dry_run"`
	// InBackoff counts the pending messages the policy has tried and may
	// try again.
	InBackoff int64 `json:"in_backoff"`
}

// PolicyStates returns the state of every policy that has one, by name.
func (s *Store) PolicyStates(ctx context.Context) (map[string]PolicyState, error) {
	rows, err := s.pool.Query(ctx, `
SELECT p.name, p.paused, p.paused_at, p.paused_by, p.paused_reason, p.last_run_at, p.last_dry_run,
    (SELECT count(*) FROM policy_attempts a JOIN dead_messages m ON m.id = a.message_id
     WHERE a.policy = p.name AND m.status = 'pending' AND NOT m.auto_exhausted)
FROM policy_state p ORDER BY p.name`)
	if err != nil {
		return nil, fmt.Errorf("store: read policy states: %w", err)
	}
	defer rows.Close()
	out := map[string]PolicyState{}
	for rows.Next() {
		var (
			name string
			st   PolicyState
			dry  []byte
		)
		if err := rows.Scan(&name, &st.Paused, &st.PausedAt, &st.PausedBy, &st.PausedReason, &st.LastRunAt, &dry, &st.InBackoff); err != nil {
			return nil, fmt.Errorf("store: read policy states: %w", err)
		}
		if len(dry) > 0 {
			var pv PolicyPreview
			if err := json.Unmarshal(dry, &pv); err == nil {
				st.LastDryRun = &pv
			}
		}
		out[name] = st
	}
	return out, rows.Err()
}

// NotePolicyRun records, under l, that the policy ran now, with its dry
// run when it is in dry-run mode (nil clears it).
func (s *Store) NotePolicyRun(ctx context.Context, l Lease, name string, dry *PolicyPreview) error {
	var b []byte
	if dry != nil {
		var err error
		if b, err = json.Marshal(dry); err != nil {
			return fmt.Errorf("store: encode dry run of policy %s: %w", name, err)
		}
	}
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
INSERT INTO policy_state (name, last_run_at, last_dry_run) VALUES ($1, now(), $2)
ON CONFLICT (name) DO UPDATE SET last_run_at = now(), last_dry_run = EXCLUDED.last_dry_run`, name, b)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: note run of policy %s: %w", name, err)
	}
	return nil
}

// PauseOnCanary pauses the policy, under l, when one of its replay tasks
// stopped because its canary died again since the last one it looked at;
// it returns that task's id (0: none, nothing changed). The pause is
// audited, and the messages of that task that were never sent do not
// count that attempt.
func (s *Store) PauseOnCanary(ctx context.Context, l Lease, name string) (int64, error) {
	actor := "policy:" + name
	var task int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
SELECT coalesce(max(t.id), 0) FROM replay_tasks t
WHERE t.created_by = $1 AND t.created_via = 'policy' AND t.status = 'canary_failed'
  AND t.id > coalesce((SELECT checked_task_id FROM policy_state WHERE name = $2), 0)`, actor, name).Scan(&task)
		if err != nil || task == 0 {
			return err
		}
		// The messages the stopped attempt never sent were not tried: their
		// attempt is given back.
		if _, err := tx.Exec(ctx, `
UPDATE policy_attempts a SET attempts = a.attempts - 1
FROM replay_task_items i
WHERE i.task_id = $1 AND i.outcome IS NULL AND a.policy = $2 AND a.message_id = i.message_id AND a.last_task_id = $1`,
			task, name); err != nil {
			return err
		}
		reason := fmt.Sprintf("the canary of replay task %d died again", task)
		if _, err := tx.Exec(ctx, `
INSERT INTO policy_state (name, paused, paused_at, paused_by, paused_reason, checked_task_id)
VALUES ($1, true, now(), $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET paused = true, paused_at = now(), paused_by = $2, paused_reason = $3,
    checked_task_id = $4`, name, actor, reason, task); err != nil {
			return err
		}
		return insertAudit(ctx, tx, Actor{Name: actor, Role: "operator", Via: ViaPolicy}, ActionPolicyPause,
			map[string]any{"policy": name}, 0, map[string]any{"reason": reason, "task_id": task})
	})
	if err != nil {
		return 0, fmt.Errorf("store: check the canaries of policy %s: %w", name, err)
	}
	return task, nil
}

// SetPolicyPaused pauses or resumes a policy for actor, with an audit row
// in the same transaction. Resuming also takes note of every canary of the
// policy that died so far: the operator resumed knowing it.
func (s *Store) SetPolicyPaused(ctx context.Context, name string, paused bool, reason string, actor Actor) (PolicyState, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return PolicyState{}, fmt.Errorf("store: begin pause of policy %s: %w", name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var was bool
	err = tx.QueryRow(ctx, `SELECT paused FROM policy_state WHERE name = $1 FOR UPDATE`, name).Scan(&was)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return PolicyState{}, fmt.Errorf("store: lock policy %s: %w", name, err)
	}
	if paused {
		_, err = tx.Exec(ctx, `
INSERT INTO policy_state (name, paused, paused_at, paused_by, paused_reason) VALUES ($1, true, now(), $2, $3)
ON CONFLICT (name) DO UPDATE SET paused = true, paused_at = now(), paused_by = $2, paused_reason = $3`,
			name, cleanText(actor.Name), nullText(reason))
	} else {
		_, err = tx.Exec(ctx, `
INSERT INTO policy_state (name, paused) VALUES ($1, false)
ON CONFLICT (name) DO UPDATE SET paused = false, paused_at = NULL, paused_by = NULL, paused_reason = NULL,
    checked_task_id = greatest(policy_state.checked_task_id, (SELECT coalesce(max(t.id), 0) FROM replay_tasks t
        WHERE t.created_by = 'policy:' || $1 AND t.created_via = 'policy' AND t.status = 'canary_failed'))`, name)
	}
	if err != nil {
		return PolicyState{}, fmt.Errorf("store: pause policy %s: %w", name, err)
	}
	action, detail := ActionPolicyResume, map[string]any{"was_paused": was}
	if paused {
		action = ActionPolicyPause
		if reason != "" {
			detail["reason"] = reason
		}
	}
	if err := insertAudit(ctx, tx, actor, action, map[string]any{"policy": name}, 0, detail); err != nil {
		return PolicyState{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return PolicyState{}, fmt.Errorf("store: commit pause of policy %s: %w", name, err)
	}
	states, err := s.PolicyStates(ctx)
	if err != nil {
		return PolicyState{}, err
	}
	return states[name], nil
}
