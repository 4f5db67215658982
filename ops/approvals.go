package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/store"
)

// ErrApprovalPending means the request was not run: it waits for a second
// principal's approval (PendingApproval says which). It is an answer, not
// a failure: the HTTP API answers 202 and the control queue ok: true, with
// the request in "approval".
var ErrApprovalPending = errors.New("approval pending")

// PendingApproval is the request recorded instead of a bulk action above
// the approval threshold.
type PendingApproval struct {
	Approval store.Approval
}

func (e *PendingApproval) Error() string {
	return fmt.Sprintf("%s of %d messages waits for approval %d (expires %s)", e.Approval.Action, e.Approval.Count,
		e.Approval.ID, e.Approval.ExpiresAt.UTC().Format(time.RFC3339))
}

// Unwrap lets errors.Is match ErrApprovalPending.
func (e *PendingApproval) Unwrap() error { return ErrApprovalPending }

// ApprovalTTLDefault is how long a request waits for a decision unless
// Config.ApprovalTTL says otherwise.
const ApprovalTTLDefault = 24 * time.Hour

// needsApproval records a request for approval when a bulk action would
// touch more than the threshold: matched is what it would touch now. The
// snapshot is selection's matches (at most limit), taken in the request's
// transaction, so an approval runs exactly what was counted. nil means
// the action may run at once. A request that no configured principal may
// approve is refused at once (ErrForbidden, saying why and what to do):
// it would wait for nobody until it expired.
func (s *Service) needsApproval(ctx context.Context, c Caller, action string, matched int64, request any, selection store.Filter, limit int) error {
	if s.cfg.ApprovalAbove <= 0 || matched <= s.cfg.ApprovalAbove {
		return nil
	}
	if err := s.approvable(c.Principal, action, matched, selection.Scope); err != nil {
		return err
	}
	req, err := json.Marshal(request)
	if err != nil {
		return fmt.Errorf("ops: encode the request for approval: %w", err)
	}
	a, err := s.st.CreateApproval(ctx, store.NewApproval{
		Action: action, Request: req, Selection: selection, Limit: int64(limit),
		TTL: s.approvalTTL(), Actor: c.actor(),
	})
	if err != nil {
		return err
	}
	s.log.Info("bulk action waits for approval", "approval_id", a.ID, "action", action, "count", a.Count,
		"requested_by", a.RequestedBy, "via", c.Via)
	return &PendingApproval{Approval: a}
}

func (s *Service) approvalTTL() time.Duration {
	if s.cfg.ApprovalTTL > 0 {
		return s.cfg.ApprovalTTL
	}
	return ApprovalTTLDefault
}

// approvalVisible reports whether p may see a request: an unscoped caller
// sees every one; a scoped caller its own and those recorded within its
// scope (the snapshot was restricted to it in SQL).
func approvalVisible(p auth.Principal, a store.Approval) bool {
	return a.RequestedBy == p.Name || coversScope(p, a)
}

// coversScope reports whether every queue of a's scope is among p's: an
// unscoped p covers every request, a request of every queue (a nil scope)
// only an unscoped p. A scoped p sees its own requests even when they are
// not covered (one its name made with a wider token).
func coversScope(p auth.Principal, a store.Approval) bool {
	return p.Queues == nil || (a.Scope != nil && subset(a.Scope, p.Queues))
}

// actionOfApproval is the operation a request carries out: approving or
// rejecting it needs that operation's role.
func actionOfApproval(a store.Approval) Action {
	switch a.Action {
	case store.ActionDelete:
		return ActDelete
	case store.ActionAcknowledge:
		return ActAcknowledge
	}
	return ActStartReplay
}

// ListApprovals returns the newest limit requests the caller may see (0:
// 50; at most 1000), newest first.
func (s *Service) ListApprovals(ctx context.Context, c Caller, limit int) ([]store.Approval, error) {
	if err := Authorize(c.Principal, ActListApprovals); err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = 50
	}
	if limit < 1 || limit > 1000 {
		return nil, invalid("limit: %d must be a whole number from 1 to 1000", limit)
	}
	out := []store.Approval{}
	var before int64
	for len(out) < limit {
		page, err := s.st.ListApprovals(ctx, before, limit)
		if err != nil {
			return nil, err
		}
		for _, a := range page {
			if approvalVisible(c.Principal, a) && len(out) < limit {
				out = append(out, a)
			}
		}
		if len(page) < limit {
			break
		}
		before = page[len(page)-1].ID
	}
	return out, nil
}

// GetApproval returns one request the caller may see.
func (s *Service) GetApproval(ctx context.Context, c Caller, id int64) (store.Approval, error) {
	if err := Authorize(c.Principal, ActListApprovals); err != nil {
		return store.Approval{}, err
	}
	a, err := s.st.GetApproval(ctx, id)
	if err != nil {
		return store.Approval{}, err
	}
	if !approvalVisible(c.Principal, a) {
		return store.Approval{}, fmt.Errorf("approval %d: %w", id, store.ErrNotFound)
	}
	return a, nil
}

// decidable loads a request the caller may decide (MayDecide): visible
// to it, needing a role it has, and not its own. A requester can never
// approve or reject its own request, whichever token of its name it uses.
func (s *Service) decidable(ctx context.Context, c Caller, id int64) (store.Approval, error) {
	if err := Authorize(c.Principal, ActDecideApproval); err != nil {
		return store.Approval{}, err
	}
	a, err := s.GetApproval(ctx, c, id)
	if err != nil {
		return store.Approval{}, err
	}
	if err := Authorize(c.Principal, actionOfApproval(a)); err != nil {
		return store.Approval{}, err
	}
	if a.RequestedBy == c.Principal.Name {
		return store.Approval{}, forbidden("token %s requested approval %d: another principal must decide it (the requester may withdraw it)", c.Principal.Name, id)
	}
	if a.Status != store.ApprovalPending {
		return store.Approval{}, fmt.Errorf("approval %d is %s, no longer pending: %w", id, a.Status, store.ErrConflict)
	}
	return a, nil
}

// requester is the actor an approved request runs as: its requester, as
// recorded when it asked, within the scope it had.
func requester(a store.Approval) store.Actor {
	return store.Actor{Name: a.RequestedBy, Role: a.RequestedRole, Via: a.RequestedVia, Scope: a.Scope}
}

// Approve carries out a pending request on its snapshot, within the
// requester's scope. The action runs as the requester's (its task's
// created_by, its audit row's actor), approved by the caller (approved_by,
// and the approval's own audit row), with the selection as the requester
// asked it. The approval commits with the action, so it runs once however
// many approve at once, and never after it expired.
func (s *Service) Approve(ctx context.Context, c Caller, id int64) (store.Approval, error) {
	a, err := s.decidable(ctx, c, id)
	if err != nil {
		return store.Approval{}, err
	}
	who, approver := requester(a), c.actor()
	who.RequestID = c.RequestID
	switch a.Action {
	case store.ActionAcknowledge, store.ActionDelete:
		var r ActionRequest
		if err := json.Unmarshal(a.Request, &r); err != nil {
			return store.Approval{}, fmt.Errorf("ops: read the request of approval %d: %w", id, err)
		}
		// The audit row shows the selection as asked (a request always
		// holds one; without, it shows the snapshot).
		var asked any
		if sel, err := Selection(r.IDs, r.Filter); err == nil {
			asked = sel
		}
		do := s.st.Acknowledge
		if a.Action == store.ActionDelete {
			do = s.st.Delete
		}
		snapshot := store.Filter{Approval: id, Status: "all", Scope: a.Scope}
		if _, err := do(ctx, snapshot, who, store.ActionOptions{Approval: id, Approver: approver, Confirm: true, AuditSelection: asked}); err != nil {
			return store.Approval{}, err
		}
	default:
		if s.cfg.Replays == nil {
			return store.Approval{}, unavailable("replays are not available on this instance")
		}
		var r ReplayRequest
		if err := json.Unmarshal(a.Request, &r); err != nil {
			return store.Approval{}, fmt.Errorf("ops: read the request of approval %d: %w", id, err)
		}
		req := r.Request
		// The task selects the snapshot (Approval); ids, filter and limit
		// stay as asked, for the task and its audit row to show.
		req.DryRun, req.Scope, req.Approval, req.Approver = false, a.Scope, id, &approver
		if req.StartAt != nil && req.StartAt.Before(time.Now()) {
			// Approved after the time it was to start: "not before
			// start_at" holds, so it starts now.
			req.StartAt = nil
		}
		if _, err := s.cfg.Replays.Start(ctx, req, who); err != nil {
			return store.Approval{}, err
		}
	}
	s.log.Info("approval carried out", "approval_id", id, "action", a.Action, "approved_by", c.Principal.Name, "requested_by", a.RequestedBy)
	return s.st.GetApproval(ctx, id)
}

// Reject turns a pending request down; nothing runs.
func (s *Service) Reject(ctx context.Context, c Caller, id int64, reason string) (store.Approval, error) {
	if err := CheckText("reason", reason); err != nil {
		return store.Approval{}, err
	}
	if _, err := s.decidable(ctx, c, id); err != nil {
		return store.Approval{}, err
	}
	return s.st.RejectApproval(ctx, id, c.actor(), reason)
}

// Withdraw takes back a pending request; nothing runs. Only its requester
// may (MayWithdraw): anyone else who may decide it rejects it instead.
func (s *Service) Withdraw(ctx context.Context, c Caller, id int64) (store.Approval, error) {
	if err := Authorize(c.Principal, ActWithdrawApproval); err != nil {
		return store.Approval{}, err
	}
	a, err := s.GetApproval(ctx, c, id)
	if err != nil {
		return store.Approval{}, err
	}
	if a.RequestedBy != c.Principal.Name {
		return store.Approval{}, forbidden("approval %d was requested by %s: only its requester may withdraw it (others who may decide it reject it)", id, a.RequestedBy)
	}
	if a.Status != store.ApprovalPending {
		return store.Approval{}, fmt.Errorf("approval %d is %s, no longer pending: %w", id, a.Status, store.ErrConflict)
	}
	w, err := s.st.WithdrawApproval(ctx, id, c.actor())
	if err != nil {
		return store.Approval{}, err
	}
	s.log.Info("approval withdrawn", "approval_id", id, "action", a.Action, "requested_by", a.RequestedBy, "via", c.Via)
	return w, nil
}
