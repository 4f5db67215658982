package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Approval statuses. A pending request past its expiry reads as expired
// whether or not the cleanup job has written so yet.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalExpired  = "expired"
	// ApprovalWithdrawn: its requester took it back before anyone decided.
	ApprovalWithdrawn = "withdrawn"
)

// Audit actions of approvals.
const (
	ActionApprovalRequest  = "approval_request"
	ActionApprove          = "approve"
	ActionReject           = "reject"
	ActionApprovalExpire   = "approval_expire"
	ActionApprovalWithdraw = "approval_withdraw"
)

// Approval is a bulk replay, acknowledge or delete waiting for, or past,
// a second principal's decision. Its JSON form is the public contract.
type Approval struct {
	ID     int64  `json:"id"`
	Action string `json:"action"`
	Status string `json:"status"`
	// Count is how many messages the snapshot holds: what the requester's
	// selection matched when the request was made.
	Count        int64  `json:"count"`
	RequestedBy  string `json:"requested_by"`
	RequestedVia string `json:"requested_via"`
	// RequestedRole is the requester's role when it asked: the action runs
	// as the requester's once approved.
	RequestedRole string          `json:"-"`
	Request       json.RawMessage `json:"request"`
	// Scope is the requester's queues; null: every queue.
	Scope     []string   `json:"scope"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	DecidedBy string     `json:"decided_by,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	// Result is what the approved action did.
	Result json.RawMessage `json:"result,omitempty"`
}

const approvalColumns = `id, action,
    CASE WHEN status = 'pending' AND expires_at <= now() THEN 'expired' ELSE status END,
    count, requested_by, requested_via, request, scope, created_at, expires_at,
    coalesce(decided_by, ''), decided_at, coalesce(reason, ''), result, requested_role`

func scanApproval(row pgx.Row) (Approval, error) {
	var a Approval
	err := row.Scan(&a.ID, &a.Action, &a.Status, &a.Count, &a.RequestedBy, &a.RequestedVia, &a.Request, &a.Scope,
		&a.CreatedAt, &a.ExpiresAt, &a.DecidedBy, &a.DecidedAt, &a.Reason, &a.Result, &a.RequestedRole)
	return a, err
}

// NewApproval is what CreateApproval records.
type NewApproval struct {
	// Action is replay, acknowledge or delete. Required.
	Action string
	// Request is the request in its public JSON form. Required.
	Request json.RawMessage
	// Selection picks the messages; its Scope must already hold the
	// requester's scope. Required.
	Selection Filter
	// Limit caps the selection (lowest ids first). 0: no cap.
	Limit int64
	// TTL is how long the request waits for a decision. Required.
	TTL   time.Duration
	Actor Actor
}

// CreateApproval records a request and its snapshot (the ids its
// selection matches now) and writes the audit row, in one transaction.
// ErrEmptySelection when nothing matches.
func (s *Store) CreateApproval(ctx context.Context, n NewApproval) (Approval, error) {
	if n.TTL <= 0 || len(n.Request) == 0 {
		return Approval{}, errors.New("store: create approval: TTL and Request are required")
	}
	tx, err := s.beginSnapshot(ctx, &n.Selection, "approval")
	if err != nil {
		return Approval{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var id int64
	err = tx.QueryRow(ctx, `
INSERT INTO approvals (action, request, scope, count, requested_by, requested_role, requested_via, request_id, expires_at)
VALUES ($1, $2, $3, 0, $4, $5, $6, $7, now() + $8::interval)
RETURNING id`, n.Action, n.Request, n.Selection.Scope, cleanText(n.Actor.Name), n.Actor.Role, n.Actor.Via,
		cleanText(n.Actor.RequestID), n.TTL.String()).Scan(&id)
	if err != nil {
		return Approval{}, fmt.Errorf("store: insert approval: %w", err)
	}
	args := sqlArgs{id}
	cond, err := n.Selection.where(&args)
	if err != nil {
		return Approval{}, err
	}
	if n.Action == ActionAcknowledge || n.Action == ActionDelete {
		cond += " AND " + actionEligible(n.Action)
	}
	limit := ""
	if n.Limit > 0 {
		limit = " LIMIT " + args.add(n.Limit)
	}
	tag, err := tx.Exec(ctx, `
INSERT INTO approval_items (approval_id, message_id)
SELECT $1, m.id FROM dead_messages m WHERE `+cond+` ORDER BY m.id`+limit, args...)
	if err != nil {
		return Approval{}, fmt.Errorf("store: snapshot approval %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return Approval{}, ErrEmptySelection
	}
	a, err := scanApproval(tx.QueryRow(ctx, `UPDATE approvals SET count = $2 WHERE id = $1 RETURNING `+approvalColumns, id, tag.RowsAffected()))
	if err != nil {
		return Approval{}, fmt.Errorf("store: count approval %d: %w", id, err)
	}
	detail := map[string]any{"approval_id": id, "for": n.Action, "expires_at": a.ExpiresAt}
	if err := insertAudit(ctx, tx, n.Actor, ActionApprovalRequest, n.Selection, a.Count, detail); err != nil {
		return Approval{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Approval{}, fmt.Errorf("store: commit approval %d: %w", id, err)
	}
	return a, nil
}

// GetApproval returns one request; ErrNotFound when there is none.
func (s *Store) GetApproval(ctx context.Context, id int64) (Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Approval{}, fmt.Errorf("approval %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Approval{}, fmt.Errorf("store: get approval %d: %w", id, err)
	}
	return a, nil
}

// ListApprovals returns requests with an id below before (0: from the
// newest), newest first.
func (s *Store) ListApprovals(ctx context.Context, before int64, limit int) ([]Approval, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+approvalColumns+` FROM approvals
WHERE $2 = 0 OR id < $2 ORDER BY id DESC LIMIT $1`, limit, before)
	if err != nil {
		return nil, fmt.Errorf("store: list approvals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Approval, error) { return scanApproval(r) })
	if err != nil {
		return nil, fmt.Errorf("store: list approvals: %w", err)
	}
	return out, nil
}

// ListPendingApprovals returns the requests waiting for a decision (not
// expired), newest first, at most limit.
func (s *Store) ListPendingApprovals(ctx context.Context, limit int) ([]Approval, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+approvalColumns+` FROM approvals
WHERE status = 'pending' AND expires_at > now() ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list pending approvals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Approval, error) { return scanApproval(r) })
	if err != nil {
		return nil, fmt.Errorf("store: list pending approvals: %w", err)
	}
	return out, nil
}

// ListPendingApprovalsOfGroup returns the requests waiting for a decision
// (not expired) whose selection is failure group group's filter, or a
// filter by its queue queue that names no group (acknowledge all of
// orders: the group's messages among them, unless its other criteria
// leave them out), newest first, at most limit: a group's page says what
// already waits for it. It reads the waiting requests only (a handful,
// they expire within a day), never the messages.
func (s *Store) ListPendingApprovalsOfGroup(ctx context.Context, group, queue string, limit int) ([]Approval, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+approvalColumns+` FROM approvals
WHERE status = 'pending' AND expires_at > now() AND (request->'filter'->>'group' = $2
    OR ($3 <> '' AND coalesce(request->'filter'->>'group', '') = '' AND request->'filter'->>'source_queue' = $3))
ORDER BY id DESC LIMIT $1`, limit, group, queue)
	if err != nil {
		return nil, fmt.Errorf("store: list pending approvals of group %q (queue %q): %w", group, queue, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Approval, error) { return scanApproval(r) })
	if err != nil {
		return nil, fmt.Errorf("store: list pending approvals of group %q (queue %q): %w", group, queue, err)
	}
	return out, nil
}

// RejectApproval rejects a pending request. ErrConflict when it is no
// longer pending (decided or expired).
func (s *Store) RejectApproval(ctx context.Context, id int64, actor Actor, reason string) (Approval, error) {
	return s.closeApproval(ctx, id, ApprovalRejected, actor, reason)
}

// WithdrawApproval is its requester's taking back a pending request:
// nothing runs. ErrConflict when it is no longer pending. Who may
// withdraw is the operations layer's rule.
func (s *Store) WithdrawApproval(ctx context.Context, id int64, actor Actor) (Approval, error) {
	return s.closeApproval(ctx, id, ApprovalWithdrawn, actor, "")
}

// closeApproval ends a pending request without running it: rejected or
// withdrawn.
func (s *Store) closeApproval(ctx context.Context, id int64, status string, actor Actor, reason string) (Approval, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Approval{}, fmt.Errorf("store: begin %s of approval %d: %w", status, id, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if err := decideApproval(ctx, tx, id, status, actor, reason); err != nil {
		return Approval{}, err
	}
	a, err := scanApproval(tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
	if err != nil {
		return Approval{}, fmt.Errorf("store: read approval %d: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Approval{}, fmt.Errorf("store: commit %s of approval %d: %w", status, id, err)
	}
	return a, nil
}

// decideApproval moves a pending, unexpired request to status (approved,
// rejected or withdrawn) inside tx and writes the decision's audit row: the approval of
// a request commits with the action it lets run, or not at all, so an
// approval runs its action exactly once however many approve at once.
func decideApproval(ctx context.Context, tx pgx.Tx, id int64, status string, actor Actor, reason string) error {
	var (
		count int64
		prev  string
	)
	err := tx.QueryRow(ctx, `
UPDATE approvals SET status = $2, decided_by = $3, decided_at = now(), reason = nullif($4, '')
WHERE id = $1 AND status = 'pending' AND expires_at > now()
RETURNING count`, id, status, cleanText(actor.Name), cleanText(reason)).Scan(&count)
	if errors.Is(err, pgx.ErrNoRows) {
		err = tx.QueryRow(ctx, `SELECT CASE WHEN status = 'pending' THEN 'expired' ELSE status END FROM approvals WHERE id = $1`, id).Scan(&prev)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("approval %d: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("store: read approval %d: %w", id, err)
		}
		return fmt.Errorf("approval %d is %s, no longer pending: %w", id, prev, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("store: decide approval %d: %w", id, err)
	}
	action := map[string]string{ApprovalApproved: ActionApprove, ApprovalRejected: ActionReject, ApprovalWithdrawn: ActionApprovalWithdraw}[status]
	detail := map[string]any{"approval_id": id}
	if reason != "" {
		detail["reason"] = reason
	}
	if err := insertAudit(ctx, tx, actor, action, map[string]any{"approval_id": id}, count, detail); err != nil {
		return err
	}
	if status != ApprovalApproved {
		return dropSnapshot(ctx, tx, id)
	}
	return nil
}

// approvedInTx approves request id inside tx, for the action that runs on
// its snapshot in the same transaction (0: no approval, nothing to do).
func approvedInTx(ctx context.Context, tx pgx.Tx, id int64, actor Actor) error {
	if id == 0 {
		return nil
	}
	return decideApproval(ctx, tx, id, ApprovalApproved, actor, "")
}

// approverOr is who approves an action that runs on approval: approver,
// or actor itself when no approver is named.
func approverOr(approver, actor Actor) Actor {
	if approver.Name == "" {
		return actor
	}
	return approver
}

// approvalResult records what an approved action did.
func approvalResult(ctx context.Context, tx pgx.Tx, id int64, result any) error {
	if id == 0 {
		return nil
	}
	b, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("store: encode the result of approval %d: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE approvals SET result = $2 WHERE id = $1`, id, b); err != nil {
		return fmt.Errorf("store: record the result of approval %d: %w", id, err)
	}
	return dropSnapshot(ctx, tx, id)
}

// dropSnapshot deletes a decided request's snapshot: the action that used
// it has run (a replay task keeps its own), or never will.
func dropSnapshot(ctx context.Context, tx pgx.Tx, id int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM approval_items WHERE approval_id = $1`, id); err != nil {
		return fmt.Errorf("store: drop the snapshot of approval %d: %w", id, err)
	}
	return nil
}

// DropExpiredSnapshots deletes up to ItemChunk rows of the snapshots of
// expired requests (ExpireApprovals leaves them), under l, and returns how
// many it deleted: call it until that is below ItemChunk.
func (s *Store) DropExpiredSnapshots(ctx context.Context, l Lease) (int64, error) {
	var n int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM approval_items WHERE ctid = ANY(ARRAY(
    SELECT i.ctid FROM approvals a JOIN approval_items i ON i.approval_id = a.id
    WHERE a.status = 'expired' LIMIT $1))`, ItemChunk)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: drop snapshots of expired approval requests: %w", err)
	}
	return n, nil
}

// ExpireApprovals marks pending requests past their expiry as expired,
// with an audit row each, at most limit per call, fenced by the cleanup
// job's lease. It returns how many it marked.
func (s *Store) ExpireApprovals(ctx context.Context, l Lease, limit int) (int64, error) {
	var n int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
UPDATE approvals SET status = 'expired', decided_at = now()
WHERE id IN (SELECT id FROM approvals WHERE status = 'pending' AND expires_at <= now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, count`, limit)
		if err != nil {
			return err
		}
		type expired struct{ id, count int64 }
		done, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (expired, error) {
			var e expired
			return e, r.Scan(&e.id, &e.count)
		})
		if err != nil {
			return err
		}
		for _, e := range done {
			// The snapshot goes later, in chunks (DropExpiredSnapshots):
			// a request over millions of messages held one that outlasted
			// the batch's timeout at every run, so it never expired, and
			// nothing behind it did.
			if err := insertAudit(ctx, tx, Actor{Name: "cleanup", Via: "cron"}, ActionApprovalExpire,
				map[string]any{"approval_id": e.id}, e.count, map[string]any{"approval_id": e.id}); err != nil {
				return err
			}
		}
		n = int64(len(done))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: expire approvals: %w", err)
	}
	return n, nil
}
