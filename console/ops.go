package console

import (
	"context"
	"time"

	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Ops is what the console asks of the operations layer; *ops.Service
// implements it. Every read and every action of the console goes through
// it, so the console never decides who may do what.
type Ops interface {
	ListMessages(ctx context.Context, c ops.Caller, r ops.ListRequest) (ops.MessagePage, error)
	GetMessage(ctx context.Context, c ops.Caller, id int64) (store.Message, error)
	MessageGone(ctx context.Context, c ops.Caller, id int64) (ops.MessageGone, error)
	MessageReplays(ctx context.Context, c ops.Caller, id int64, firstFailed time.Time) ([]ops.MessageReplay, bool, error)
	Acknowledge(ctx context.Context, c ops.Caller, r ops.ActionRequest) (store.ActionResult, error)
	Delete(ctx context.Context, c ops.Caller, r ops.ActionRequest) (store.ActionResult, error)
	StartReplay(ctx context.Context, c ops.Caller, r ops.ReplayRequest) (replay.Task, error)
	GetReplay(ctx context.Context, c ops.Caller, id int64) (replay.Task, error)
	ListReplays(ctx context.Context, c ops.Caller, limit int) ([]replay.Task, error)
	ListActiveReplays(ctx context.Context, c ops.Caller, limit int) ([]replay.Task, error)
	CancelReplay(ctx context.Context, c ops.Caller, id int64) (replay.Task, error)
	Groups(ctx context.Context, c ops.Caller, q store.GroupQuery) ([]store.Group, error)
	Group(ctx context.Context, c ops.Caller, id string) (store.Group, error)
	GroupReplays(ctx context.Context, c ops.Caller, id string) (ops.GroupReplays, error)
	Status(ctx context.Context, c ops.Caller) (ops.StatusView, error)
	Arrivals(ctx context.Context, c ops.Caller) (store.HourlyArrivals, error)
	Audit(ctx context.Context, c ops.Caller, q ops.AuditRequest) (ops.AuditPage, error)
	Jobs(ctx context.Context, c ops.Caller) (cron.JobsView, error)
	Alerts(ctx context.Context, c ops.Caller) (cron.AlertsView, error)
	ApprovalViews(ctx context.Context, c ops.Caller, limit int) ([]ops.ApprovalView, error)
	ApprovalViewOf(ctx context.Context, c ops.Caller, id int64, refresh bool) (ops.ApprovalView, error)
	ApproversOf(a store.Approval) []string
	NoticeApproval(c ops.Caller, action string, count int64) ops.ApprovalNotice
	PendingForMe(ctx context.Context, c ops.Caller) (int, error)
	PendingGroupApprovals(ctx context.Context, c ops.Caller, g store.Group) ([]ops.GroupApproval, error)
	Approve(ctx context.Context, c ops.Caller, id int64) (store.Approval, error)
	Reject(ctx context.Context, c ops.Caller, id int64, reason string) (store.Approval, error)
	Withdraw(ctx context.Context, c ops.Caller, id int64) (store.Approval, error)
	ReplayErrors(ctx context.Context, c ops.Caller, id int64, limit int) ([]store.ReplayErrorCount, int64, error)
	EditReplay(ctx context.Context, c ops.Caller, id int64, r ops.EditRequest) (ops.EditResult, error)
	EditLinks(ctx context.Context, c ops.Caller, m store.Message) (ops.EditLinks, error)
	CheckReplayTarget(ctx context.Context, c ops.Caller, target *replay.Target) (ops.TargetCheck, error)
	SearchReach(c ops.Caller) ops.SearchReach
}

var _ Ops = (*ops.Service)(nil)
