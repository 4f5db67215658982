package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ActionOptions tunes a bulk acknowledge or delete.
type ActionOptions struct {
	// DryRun counts what would change and changes nothing.
	DryRun bool
	// Confirm allows a selection by filter larger than ConfirmAbove.
	Confirm bool
	// ConfirmAbove is the largest selection by filter that runs without
	// Confirm. Optional; 0 never asks for confirmation.
	ConfirmAbove int64
	// Limit caps how many messages a filter selects, oldest first.
	// Optional; 0 means no cap.
	Limit int
	// Approval, when set, is the approval request this action carries out:
	// it is approved in the action's own transaction (ErrConflict when it
	// is no longer pending), and records the result.
	Approval int64
	// Approver, with Approval, is the principal who approves it: the
	// decision's audit row is its, and the action's row (whose actor is
	// then the requester) names it as approved_by.
	Approver Actor
	// AuditSelection is what the audit row says was selected: the
	// selection as asked. Optional; default the filter acted on (which,
	// for an approval, is its snapshot).
	AuditSelection any
}

// ActionResult reports a bulk acknowledge or delete.
type ActionResult struct {
	Action string `json:"action"`
	// Matched is how many selected messages the action applies to.
	Matched int64 `json:"matched"`
	// Changed is how many were changed (0 for a dry run).
	Changed int64 `json:"changed"`
	// Unchanged counts selected messages already in the target state
	// (acknowledging an acknowledged message).
	Unchanged int64 `json:"unchanged"`
	// NotFound lists requested ids that do not exist (or are out of scope).
	NotFound []int64 `json:"not_found,omitempty"`
	DryRun   bool    `json:"dry_run"`
	// Gone counts, for an approved action run on its request's snapshot,
	// the snapshot's messages deleted since it was asked for; Replaying
	// those left as they are because they were being replayed. With
	// Unchanged (already acknowledged), they say why the action changed
	// fewer messages than the request counted.
	Gone      int64 `json:"gone,omitempty"`
	Replaying int64 `json:"replaying,omitempty"`
	// DryRunApproval says, in a dry run's answer, whether the real action
	// would wait for approval.
	DryRunApproval
}

// DryRunApproval is what a dry run's answer says of four-eyes approval:
// whether the real action would wait for a second principal, and who may
// give it, so that an operator learns it before asking, not after. The
// operations layer fills it in (ops.Service.NoticeApproval, the rule the
// web console's confirmation follows); it is absent from every answer but
// a dry run's.
type DryRunApproval struct {
	// ApprovalRequired: the real action selects more than approval_above
	// and would wait for approval (or be refused, when no configured token
	// may approve it: Approval says which).
	ApprovalRequired *bool `json:"approval_required,omitempty"`
	// Approvers names the configured tokens that may approve it, sorted;
	// absent when none may or this instance does not know them.
	Approvers []string `json:"approvers,omitempty"`
	// ApprovalNote says the same in words, for a person: needed or not
	// and why, who may approve, or that the real request would be
	// refused. Not "approval": an answer with "approval" is one that
	// waits for approval (202 {"approval": {…}}), and clients tell them
	// apart by it.
	ApprovalNote string `json:"approval_note,omitempty"`
}

// ErrConfirmRequired means a bulk action by filter selects more messages
// than the threshold and the request did not say confirm.
var ErrConfirmRequired = errors.New("confirmation required")

// ConfirmError says how many messages need confirming.
type ConfirmError struct {
	Matched, Threshold int64
}

func (e *ConfirmError) Error() string {
	return fmt.Sprintf("the filter selects more than %d messages (at least %d); repeat with confirm: true, or use dry_run to count them", e.Threshold, e.Matched)
}

func (e *ConfirmError) Unwrap() error { return ErrConfirmRequired }

// Audit actions written by this file.
const (
	ActionAcknowledge = "acknowledge"
	ActionDelete      = "delete"
)

// Acknowledge marks the selected messages acknowledged: the operator has
// handled them and they leave the pending lists, but stay stored. Pending
// and replayed messages can be acknowledged. A message that is replaying
// cannot: selected by id, that is ErrConflict and nothing changes; selected
// by filter, it is left out.
func (s *Store) Acknowledge(ctx context.Context, f Filter, actor Actor, opt ActionOptions) (ActionResult, error) {
	return s.act(ctx, ActionAcknowledge, f, actor, opt)
}

// Delete removes the selected messages for good. A message that is
// replaying cannot be deleted: selected by id, that is ErrConflict and
// nothing changes; selected by filter, it is left out.
func (s *Store) Delete(ctx context.Context, f Filter, actor Actor, opt ActionOptions) (ActionResult, error) {
	return s.act(ctx, ActionDelete, f, actor, opt)
}

// DeleteMessage deletes one message: ErrNotFound when there is none,
// ErrConflict when it is replaying.
func (s *Store) DeleteMessage(ctx context.Context, id int64, actor Actor) error {
	return s.DeleteMessageIn(ctx, id, nil, actor)
}

// DeleteMessageIn is DeleteMessage for a caller restricted to the source
// queues in scope (nil: all); a message outside it is ErrNotFound.
func (s *Store) DeleteMessageIn(ctx context.Context, id int64, scope []string, actor Actor) error {
	res, err := s.act(ctx, ActionDelete, Filter{IDs: []int64{id}, Status: "all", Scope: scope}, actor, ActionOptions{})
	if err != nil {
		return err
	}
	if res.Changed == 0 {
		return fmt.Errorf("store: delete message %d: %w", id, ErrNotFound)
	}
	return nil
}

// actionEligible is the condition on the rows a bulk action changes:
// every status but replaying (acknowledge: nor acknowledged), spelled out
// so that the listing indexes (which leave replaying rows out, migration
// 00061) can serve it. An approval's snapshot takes the same rows
// (CreateApproval), so that what is approved is what the action changes.
func actionEligible(action string) string {
	return statusIn("m", EligibleStatuses(action))
}

// EligibleStatuses are the statuses of the messages an action acts on:
// acknowledge and delete as actionEligible says; a replay (any other
// action) publishes pending messages only, and skips the rest as
// not_pending (the claim, replay_claims.go).
func EligibleStatuses(action string) []string {
	switch action {
	case ActionAcknowledge:
		return []string{StatusPending, StatusReplayed}
	case ActionDelete:
		return []string{StatusPending, StatusReplayed, StatusAcknowledged}
	}
	return []string{StatusPending}
}

// act runs one bulk action in one transaction: select and lock the rows,
// change them, adjust the counters, write the audit row.
func (s *Store) act(ctx context.Context, action string, f Filter, actor Actor, opt ActionOptions) (ActionResult, error) {
	res := ActionResult{Action: action, DryRun: opt.DryRun}
	f, sel, err := s.actionSelection(ctx, action, f, opt)
	if err != nil {
		return res, err
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("store: %s: begin: %w", action, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	if !opt.DryRun {
		if err := approvedInTx(ctx, tx, opt.Approval, approverOr(opt.Approver, actor)); err != nil {
			return res, err
		}
	}
	if sel.byIDs {
		found, err := s.checkIDs(ctx, tx, action, f, sel.where, sel.args, &res)
		if err != nil {
			return res, err
		}
		if found == 0 {
			// Nothing named exists: nothing to change or to audit.
			return res, nil
		}
	} else if !opt.DryRun && opt.ConfirmAbove > 0 && !opt.Confirm {
		n, err := countSelected(ctx, tx, action, sel, fmt.Sprintf(" LIMIT %d", capLimit(opt.Limit, opt.ConfirmAbove+1)))
		if err != nil {
			return res, err
		}
		if n > opt.ConfirmAbove {
			return res, &ConfirmError{Matched: n, Threshold: opt.ConfirmAbove}
		}
	}

	if opt.DryRun {
		n, err := countSelected(ctx, tx, action, sel, sel.limit)
		if err != nil {
			return res, err
		}
		res.Matched += n
		return res, nil
	}

	if err := changeAndRecord(ctx, tx, action, f, actor, opt, sel, &res); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("store: %s: commit: %w", action, err)
	}
	return res, nil
}

// actSelection is the part of a bulk action's statements that selects
// its rows.
type actSelection struct {
	byIDs    bool   // the filter names ids
	where    string // the filter's condition on m, with args
	args     sqlArgs
	eligible string // actionEligible
	limit    string // a LIMIT clause, or ""
}

// actionSelection checks a bulk action's filter and limit, and returns the
// filter as the action reads it (ids name messages whatever their status)
// with its selection.
func (s *Store) actionSelection(ctx context.Context, action string, f Filter, opt ActionOptions) (Filter, actSelection, error) {
	f, err := s.withIndex(ctx, f)
	if err != nil {
		return f, actSelection{}, err
	}
	sel := actSelection{byIDs: len(f.IDs) > 0}
	if sel.byIDs && strings.TrimSpace(f.Status) == "" {
		// Ids name messages whatever their status.
		f.Status = "all"
	}
	if sel.where, err = f.where(&sel.args); err != nil {
		return f, actSelection{}, err
	}
	if opt.Limit < 0 {
		return f, actSelection{}, fmt.Errorf("%w: limit %d must be >= 0", ErrInvalidFilter, opt.Limit)
	}
	sel.eligible = actionEligible(action)
	if opt.Limit > 0 && !sel.byIDs {
		sel.limit = fmt.Sprintf(" LIMIT %d", opt.Limit)
	}
	return f, sel, nil
}

// countSelected counts the eligible rows sel selects, up to limit (a
// LIMIT clause, or "").
func countSelected(ctx context.Context, tx pgx.Tx, action string, sel actSelection, limit string) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM dead_messages m WHERE `+sel.where+` AND `+sel.eligible+limit+`) c`, sel.args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: %s: count selection: %w", action, err)
	}
	return n, nil
}

// changeAndRecord changes the rows sel selects, and records it: the
// counters, res, the audit row and the approval's result.
func changeAndRecord(ctx context.Context, tx pgx.Tx, action string, f Filter, actor Actor, opt ActionOptions, sel actSelection, res *ActionResult) error {
	moves, err := changeSelected(ctx, tx, action, sel.where+` AND `+sel.eligible, sel.limit, sel.args)
	if err != nil {
		return err
	}
	for _, m := range moves {
		res.Changed += m.Messages
	}
	res.Matched += res.Changed
	if err := applyStatusDeltas(ctx, tx, moves); err != nil {
		return fmt.Errorf("store: %s: %w", action, err)
	}
	if f.Approval > 0 && opt.Approval == f.Approval {
		if err := snapshotLeft(ctx, tx, action, f.Approval, res); err != nil {
			return err
		}
	}
	if err := auditAct(ctx, tx, action, f, actor, opt, *res); err != nil {
		return err
	}
	return approvalResult(ctx, tx, opt.Approval, *res)
}

// snapshotLeft counts, after an approved action changed its snapshot's
// rows, what it left of the snapshot and why: acknowledged already
// (Unchanged, counted in Matched as a selection by ids counts it), deleted
// since the request (Gone), being replayed (Replaying). Counted after the
// change, in its transaction: the rows it changed are locked and counted
// as changed, not as anything else.
func snapshotLeft(ctx context.Context, tx pgx.Tx, action string, approval int64, res *ActionResult) error {
	var missing, acknowledged, replaying int64
	err := tx.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE m.id IS NULL),
       count(*) FILTER (WHERE m.status = $2),
       count(*) FILTER (WHERE m.status = $3)
FROM approval_items i LEFT JOIN dead_messages m ON m.id = i.message_id
WHERE i.approval_id = $1`, approval, StatusAcknowledged, StatusReplaying).Scan(&missing, &acknowledged, &replaying)
	if err != nil {
		return fmt.Errorf("store: %s: count what approval %d left of its snapshot: %w", action, approval, err)
	}
	res.Replaying = replaying
	if action == ActionDelete {
		// The rows it deleted are missing now too.
		res.Gone = max(0, missing-res.Changed)
		return nil
	}
	res.Gone = missing
	res.Unchanged = max(0, acknowledged-res.Changed)
	res.Matched += res.Unchanged
	return nil
}

// changeSelected acknowledges or deletes, in id order, the rows where
// selects (up to limit, a LIMIT clause or ""), holding each row's lock,
// and returns the moves of the status counters.
func changeSelected(ctx context.Context, tx pgx.Tx, action, where, limit string, args sqlArgs) ([]StatusMove, error) {
	var change string
	switch action {
	case ActionAcknowledge:
		change = `
UPDATE dead_messages d SET status = 'acknowledged', acknowledged_at = now(), status_changed_at = now()
FROM sel WHERE d.id = sel.id
RETURNING d.source_queue, d.group_id, sel.status AS from_status, 'acknowledged'::text AS to_status, d.body_size`
	case ActionDelete:
		change = `
DELETE FROM dead_messages d USING sel WHERE d.id = sel.id
RETURNING d.source_queue, d.group_id, sel.status AS from_status, NULL::text AS to_status, d.body_size`
	}
	rows, err := tx.Query(ctx, `
WITH sel AS (
    SELECT m.id, m.status FROM dead_messages m
    WHERE `+where+`
    ORDER BY m.id`+limit+`
    FOR UPDATE
), chg AS (`+change+`)
SELECT source_queue, group_id, from_status, to_status, count(*), coalesce(sum(body_size), 0)
FROM chg GROUP BY 1, 2, 3, 4`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: change messages: %w", action, err)
	}
	moves, err := statusMovesSQL(rows)
	if err != nil {
		return nil, fmt.Errorf("store: %s: change messages: %w", action, err)
	}
	return moves, nil
}

// auditAct records an acknowledge or delete in the audit: what was
// selected (as asked: opt.AuditSelection, else the filter), by whom,
// approved by whom, and its counts.
func auditAct(ctx context.Context, tx pgx.Tx, action string, f Filter, actor Actor, opt ActionOptions, res ActionResult) error {
	detail := map[string]any{"matched": res.Matched, "unchanged": res.Unchanged}
	if f.Scope != nil {
		detail["scope"] = f.Scope
	}
	if opt.Limit > 0 {
		detail["limit"] = opt.Limit
	}
	if opt.Confirm {
		detail["confirm"] = true
	}
	if len(res.NotFound) > 0 {
		detail["not_found"] = res.NotFound
	}
	if opt.Approval > 0 {
		detail["approval_id"] = opt.Approval
	}
	var sel any = f
	if opt.AuditSelection != nil {
		sel = opt.AuditSelection
	}
	approvedBy := ""
	if opt.Approval > 0 {
		approvedBy = approverOr(opt.Approver, actor).Name
	}
	if err := insertAuditApproved(ctx, tx, actor, approvedBy, action, sel, res.Changed, detail); err != nil {
		return fmt.Errorf("store: %s: %w", action, err)
	}
	return nil
}

// checkIDs locks the messages a selection by id names and checks them: a
// replaying one is a conflict, missing ones are reported, ones already in
// the target state are counted as unchanged.
func (s *Store) checkIDs(ctx context.Context, tx pgx.Tx, action string, f Filter, where string, args sqlArgs, res *ActionResult) (int, error) {
	rows, err := tx.Query(ctx, `SELECT m.id, m.status FROM dead_messages m WHERE `+where+` ORDER BY m.id FOR UPDATE`, args...)
	if err != nil {
		return 0, fmt.Errorf("store: %s: lock messages: %w", action, err)
	}
	found := make(map[int64]bool, len(f.IDs))
	var replaying []int64
	for rows.Next() {
		var (
			id     int64
			status string
		)
		if err := rows.Scan(&id, &status); err != nil {
			rows.Close()
			return 0, fmt.Errorf("store: %s: lock messages: %w", action, err)
		}
		found[id] = true
		switch {
		case status == StatusReplaying:
			replaying = append(replaying, id)
		case action == ActionAcknowledge && status == StatusAcknowledged:
			res.Unchanged++
			res.Matched++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("store: %s: lock messages: %w", action, err)
	}
	if len(replaying) > 0 {
		return 0, fmt.Errorf("store: %s: messages %v are being replayed: %w", action, replaying, ErrConflict)
	}
	seen := make(map[int64]bool, len(f.IDs))
	for _, id := range f.IDs {
		if !found[id] && !seen[id] {
			res.NotFound = append(res.NotFound, id)
		}
		seen[id] = true
	}
	return len(found), nil
}

// capLimit returns the smaller positive of limit and n.
func capLimit(limit int, n int64) int64 {
	if limit > 0 && int64(limit) < n {
		return int64(limit)
	}
	return n
}
