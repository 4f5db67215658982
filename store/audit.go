package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Audit actions of replays; the others are with what writes them
// (actions.go, approvals.go, cleanup.go, edits.go, policies.go).
const (
	ActionReplay       = "replay"
	ActionReplayCancel = "replay_cancel"
	ActionImport       = "import"
)

// AuditActions lists every action the audit log records: what an audit
// query's action may be.
var AuditActions = []string{ActionAcknowledge, ActionDelete, ActionReplay, ActionReplayCancel, ActionEditReplay,
	ActionImport, ActionApprovalRequest, ActionApprove, ActionReject, ActionApprovalWithdraw, ActionApprovalExpire,
	ActionPolicyPark, ActionPolicyPause, ActionPolicyResume, AuditActionRetention, AuditActionEvict, AuditActionExpireAudit}

// Actor is who asks for a change, recorded with it.
type Actor struct {
	// Name identifies the token or component ("admin", "token:ops", "cleanup").
	Name string `json:"actor"`
	// Role is viewer, operator or admin ("" for internal components).
	Role string `json:"role,omitempty"`
	// Via is api, control, cli or cron.
	Via string `json:"via"`
	// RequestID ties the row to the request's logs (X-Request-Id or the
	// control command id).
	RequestID string `json:"request_id,omitempty"`
	// Scope is the source queues the actor is restricted to (its token's
	// queues); nil means every queue.
	Scope []string `json:"scope,omitempty"`
}

// AuditEntry is one audit row.
type AuditEntry struct {
	ID        int64           `json:"id"`
	At        time.Time       `json:"at"`
	Actor     string          `json:"actor"`
	Role      string          `json:"role"`
	Via       string          `json:"via"`
	Action    string          `json:"action"`
	Selection json.RawMessage `json:"selection"`
	Count     int64           `json:"count"`
	RequestID string          `json:"request_id"`
	// Scope is the actor's queues when it acted; null: every queue.
	Scope []string `json:"scope"`
	// ApprovedBy names the second principal who approved the action (four-
	// eyes approval); the actor is then its requester. Absent otherwise.
	ApprovedBy string          `json:"approved_by,omitempty"`
	Detail     json.RawMessage `json:"detail,omitempty"`
}

// insertAudit writes one audit row inside tx, so the row exists exactly
// when the change it describes committed.
func insertAudit(ctx context.Context, tx pgx.Tx, a Actor, action string, selection any, count int64, detail any) error {
	return insertAuditApproved(ctx, tx, a, "", action, selection, count, detail)
}

// insertAuditApproved is insertAudit for an action that runs on approval:
// a is its requester, approvedBy the principal who approved it ("" when
// none did).
func insertAuditApproved(ctx context.Context, tx pgx.Tx, a Actor, approvedBy, action string, selection any, count int64, detail any) error {
	sel, err := json.Marshal(selection)
	if err != nil {
		return fmt.Errorf("encode audit selection: %w", err)
	}
	var det []byte
	if detail != nil {
		if det, err = json.Marshal(detail); err != nil {
			return fmt.Errorf("encode audit detail: %w", err)
		}
	}
	_, err = tx.Exec(ctx, `
INSERT INTO audit_log (actor, role, via, action, selection, count, request_id, detail, scope, approved_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''))`,
		cleanText(a.Name), a.Role, a.Via, action, sel, count, cleanText(a.RequestID), det, a.Scope, cleanText(approvedBy))
	if err != nil {
		return fmt.Errorf("write audit row for %s by %s: %w", action, a.Name, err)
	}
	return nil
}
