package console

// This file mirrors the contract of the operations layer (package ops,
// /work/notes/ops-contract.md) until that package lands: the same names,
// fields and signatures, so that switching to it is a matter of turning
// these declarations into aliases of ops's own.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Ops is what the console asks of the operations layer; *ops.Service
// implements it. Every read and every action of the console goes through
// it, so the console never decides who may do what.
type Ops interface {
	ListMessages(ctx context.Context, c Caller, r ListRequest) (MessagePage, error)
	GetMessage(ctx context.Context, c Caller, id int64) (store.Message, error)
	DeleteMessage(ctx context.Context, c Caller, id int64) (store.ActionResult, error)
	Acknowledge(ctx context.Context, c Caller, r ActionRequest) (store.ActionResult, error)
	Delete(ctx context.Context, c Caller, r ActionRequest) (store.ActionResult, error)
	StartReplay(ctx context.Context, c Caller, r ReplayRequest) (replay.Task, error)
	GetReplay(ctx context.Context, c Caller, id int64) (replay.Task, error)
	ListReplays(ctx context.Context, c Caller, limit int) ([]replay.Task, error)
	CancelReplay(ctx context.Context, c Caller, id int64) (replay.Task, error)
	Groups(ctx context.Context, c Caller, q store.GroupQuery) ([]store.Group, error)
	Group(ctx context.Context, c Caller, id string) (store.Group, error)
	Stats(ctx context.Context, c Caller) (store.Stats, error)
	Status(ctx context.Context, c Caller) (StatusView, error)
	Audit(ctx context.Context, c Caller, q AuditRequest) (AuditPage, error)
	Jobs(ctx context.Context, c Caller) (cleanup.JobsView, error)
	Alerts(ctx context.Context, c Caller) (cleanup.AlertsView, error)
	Arrivals(ctx context.Context, c Caller) (store.HourlyArrivals, error)
}

// ViaConsole is the door the console's audit rows name.
const ViaConsole = "console"

// Caller is who acts, and through which door.
type Caller struct {
	Principal auth.Principal
	Via       string
	RequestID string
}

// Action names one operation of the layer.
type Action string

// The actions whose controls the console shows or hides.
const (
	ActGetMessage   Action = "get_message"
	ActAcknowledge  Action = "acknowledge"
	ActStartReplay  Action = "start_replay"
	ActCancelReplay Action = "cancel_replay"
	ActDelete       Action = "delete"
	ActAudit        Action = "audit"
)

var permissions = map[Action]string{
	ActGetMessage: auth.RoleViewer, ActAcknowledge: auth.RoleOperator, ActStartReplay: auth.RoleOperator,
	ActCancelReplay: auth.RoleOperator, ActDelete: auth.RoleAdmin, ActAudit: auth.RoleAdmin,
}

// ErrForbidden and the other sentinels of the layer.
var (
	ErrForbidden   = errors.New("forbidden")
	ErrInvalid     = errors.New("invalid request")
	ErrUnavailable = errors.New("unavailable")
)

// Authorize reports whether p may perform a.
func Authorize(p auth.Principal, a Action) error {
	if need := permissions[a]; !p.Can(need) {
		return fmt.Errorf("%w: token %s has role %s; %s needs %s", ErrForbidden, p.Name, p.Role, a, need)
	}
	return nil
}

// ListRequest asks for one page of messages.
type ListRequest struct {
	Filter      store.Filter
	Limit       int
	Cursor      string
	IncludeBody bool
}

// MessagePage is one page of messages.
type MessagePage struct {
	Messages   []store.Message
	NextCursor *string
	HasMore    bool
}

// ActionRequest is an acknowledge or delete.
type ActionRequest struct {
	IDs     []int64
	Filter  *store.Filter
	Limit   int
	DryRun  bool
	Confirm bool
}

// ReplayRequest starts a replay.
type ReplayRequest struct {
	replay.Request
	Confirm bool
}

// StatusView is the per-queue summary.
type StatusView struct {
	At     time.Time
	Queues []store.QueueStats
}

// AuditRequest asks for one page of the audit log.
type AuditRequest struct {
	Actor, Action string
	Since         *time.Time
	Limit         int
	Cursor        string
}

// AuditPage is one page of the audit log.
type AuditPage struct {
	Entries    []store.AuditEntry
	NextCursor *string
	HasMore    bool
}

// Codes of Classify.
const (
	CodeForbidden       = "forbidden"
	CodeNotFound        = "not_found"
	CodeInvalid         = "invalid_request"
	CodeConfirmRequired = "confirm_required"
	CodeConflict        = "conflict"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal"
)

// Classify maps an error of the layer to its public code.
func Classify(err error) string {
	var ce *store.ConfirmError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrForbidden):
		return CodeForbidden
	case errors.As(err, &ce):
		return CodeConfirmRequired
	case errors.Is(err, ErrInvalid), errors.Is(err, replay.ErrInvalidRequest), errors.Is(err, store.ErrInvalidFilter):
		return CodeInvalid
	case errors.Is(err, store.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, store.ErrConflict):
		return CodeConflict
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	}
	return CodeInternal
}

// Message is the text of err for a caller.
func Message(err error) string { return err.Error() }
