package ops

import (
	"fmt"
	"slices"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Action names one operation of the layer.
type Action string

// The operations. Each has one entry in the permission table.
const (
	ActListMessages Action = "list_messages"
	ActGetMessage   Action = "get_message"
	ActGroups       Action = "groups"
	ActStats        Action = "stats"
	ActStatus       Action = "status"
	ActListReplays  Action = "list_replays"
	ActGetReplay    Action = "get_replay"
	ActJobs         Action = "jobs"
	ActAlerts       Action = "alerts"
	ActAcknowledge  Action = "acknowledge"
	ActStartReplay  Action = "start_replay"
	ActCancelReplay Action = "cancel_replay"
	ActEditReplay   Action = "edit_replay"
	ActDelete       Action = "delete"
	ActAudit        Action = "audit"
	ActExport       Action = "export_messages"
	ActImport       Action = "import_messages"
	// Approvals: anyone may see the requests within their scope; deciding
	// one needs at least operator, and then the role of what it carries
	// out (ops.Approve checks both).
	ActListApprovals  Action = "list_approvals"
	ActDecideApproval Action = "decide_approval"
	// Withdrawing is its requester's only (ops.Withdraw checks): the role
	// is the least, so a token whose role was lowered since can still
	// take its own request back.
	ActWithdrawApproval Action = "withdraw_approval"
	// Automatic replay policies: anyone may see those of their queues;
	// pausing and resuming one is an operator's.
	ActListPolicies Action = "list_policies"
	ActPausePolicy  Action = "pause_policy"
)

// permissions is the permission table: the least role each action needs.
// Viewers read; operators also replay and acknowledge (reversible: the
// message stays stored) and read the audit rows of their queues
// (ops.Audit); admins also delete.
var permissions = map[Action]string{
	ActListMessages: auth.RoleViewer,
	ActGetMessage:   auth.RoleViewer,
	ActGroups:       auth.RoleViewer,
	ActStats:        auth.RoleViewer,
	ActStatus:       auth.RoleViewer,
	ActListReplays:  auth.RoleViewer,
	ActGetReplay:    auth.RoleViewer,
	ActJobs:         auth.RoleViewer,
	ActAlerts:       auth.RoleViewer,
	ActAcknowledge:  auth.RoleOperator,
	ActStartReplay:  auth.RoleOperator,
	ActCancelReplay: auth.RoleOperator,
	ActEditReplay:   auth.RoleOperator,
	ActDelete:       auth.RoleAdmin,
	ActAudit:        auth.RoleOperator,
	// An export is a listing with bodies: a viewer allowed to see bodies
	// may read it. An import creates messages from outside, which only an
	// admin may do.
	ActExport: auth.RoleViewer,
	ActImport: auth.RoleAdmin,

	ActListApprovals:    auth.RoleViewer,
	ActDecideApproval:   auth.RoleOperator,
	ActWithdrawApproval: auth.RoleViewer,

	ActListPolicies: auth.RoleViewer,
	ActPausePolicy:  auth.RoleOperator,
}

// Actions lists every action, for tables and tests.
func Actions() []Action {
	out := make([]Action, 0, len(permissions))
	for a := range permissions {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// RoleFor is the least role a caller needs for a. It panics on an action
// that is not in the table: that is a programming error a test catches.
func RoleFor(a Action) string {
	r, ok := permissions[a]
	if !ok {
		panic(fmt.Sprintf("ops: action %q has no entry in the permission table", a))
	}
	return r
}

// Authorize reports whether p may perform a: nil, or an error matching
// ErrForbidden that names the token, its role and the role needed. Doors
// call it to refuse before reading a request; every method calls it again.
func Authorize(p auth.Principal, a Action) error {
	need := RoleFor(a)
	if !p.Can(need) {
		return forbidden("token %s has role %s; %s needs %s", p.Name, p.Role, a, need)
	}
	return nil
}

// scoped applies p's queue scope to f: a filter naming a queue outside it
// is ErrForbidden; otherwise the scope becomes part of the filter, so
// nothing outside it is read or changed.
func scoped(p auth.Principal, f store.Filter) (store.Filter, error) {
	if p.Queues == nil {
		return f, nil
	}
	if f.SourceQueue != "" && !p.SeesQueue(f.SourceQueue) {
		return f, forbidden("source_queue: token %s may not see queue %q", p.Name, f.SourceQueue)
	}
	f.Scope = p.Queues
	return f, nil
}

// TaskVisible reports whether p may see (and, with the role, cancel) a
// replay task. An unscoped caller sees every task. A scoped caller sees
// the tasks it started, and the tasks that provably touched only queues in
// its scope: those recorded with a scope inside its own (the selection
// was restricted to it in SQL), and those whose filter names one source
// queue it sees. A task by ids or by an unrestricted filter, started by an
// unscoped caller, may have touched any queue, so it stays hidden.
func TaskVisible(p auth.Principal, t replay.Task) bool {
	if p.Queues == nil || t.CreatedBy == p.Name {
		return true
	}
	if t.Request.Scope != nil && subset(t.Request.Scope, p.Queues) {
		return true
	}
	f := t.Request.Filter
	return f != nil && len(t.Request.IDs) == 0 && f.SourceQueue != "" && p.SeesQueue(f.SourceQueue)
}

func subset(of, in []string) bool {
	for _, q := range of {
		if !slices.Contains(in, q) {
			return false
		}
	}
	return true
}

// needsConfirm reports whether a selection by filter that would touch
// matched messages must be confirmed. threshold 0 never asks.
func needsConfirm(matched, threshold int64, confirmed bool) error {
	if confirmed || threshold <= 0 || matched <= threshold {
		return nil
	}
	return &store.ConfirmError{Matched: matched, Threshold: threshold}
}
