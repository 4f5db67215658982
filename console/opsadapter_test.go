package console_test

// storeOps stands in for *ops.Service until the operations layer lands:
// the same methods over the real store and replay service, applying the
// role and the queue scope. It is replaced by ops.New in the tests then.

import (
	"context"
	"strconv"

	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/console"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

type storeOps struct {
	st *store.Store
	rp *replay.Service
}

func actor(c console.Caller) store.Actor {
	p := c.Principal
	return store.Actor{Name: p.Name, Role: p.Role, Via: c.Via, RequestID: c.RequestID, Scope: p.Queues}
}

func (o storeOps) scoped(c console.Caller, f store.Filter) (store.Filter, error) {
	if f.SourceQueue != "" && !c.Principal.SeesQueue(f.SourceQueue) {
		return f, console.ErrForbidden
	}
	f.Scope = c.Principal.Queues
	return f, nil
}

func (o storeOps) ListMessages(ctx context.Context, c console.Caller, r console.ListRequest) (console.MessagePage, error) {
	f, err := o.scoped(c, r.Filter)
	if err != nil {
		return console.MessagePage{}, err
	}
	var before int64
	if r.Cursor != "" {
		before, _ = strconv.ParseInt(r.Cursor, 10, 64)
	}
	p, err := o.st.ListMessages(ctx, f, store.ListOptions{Limit: r.Limit, Before: before, NoBodySearch: !c.Principal.Bodies})
	if err != nil {
		return console.MessagePage{}, err
	}
	out := console.MessagePage{Messages: p.Messages, HasMore: p.HasMore}
	if p.HasMore {
		s := strconv.FormatInt(p.Messages[len(p.Messages)-1].ID, 10)
		out.NextCursor = &s
	}
	return out, nil
}

func (o storeOps) GetMessage(ctx context.Context, c console.Caller, id int64) (store.Message, error) {
	m, err := o.st.GetMessage(ctx, id, c.Principal.Queues)
	if err == nil && !c.Principal.Bodies {
		m.Body = nil
	}
	return m, err
}

func (o storeOps) DeleteMessage(ctx context.Context, c console.Caller, id int64) (store.ActionResult, error) {
	return o.Delete(ctx, c, console.ActionRequest{IDs: []int64{id}})
}

func (o storeOps) bulk(ctx context.Context, c console.Caller, a console.Action, r console.ActionRequest,
	do func(context.Context, store.Filter, store.Actor, store.ActionOptions) (store.ActionResult, error)) (store.ActionResult, error) {
	if err := console.Authorize(c.Principal, a); err != nil {
		return store.ActionResult{}, err
	}
	f := store.Filter{IDs: r.IDs, Status: "all"}
	if r.Filter != nil {
		f = *r.Filter
	}
	f, err := o.scoped(c, f)
	if err != nil {
		return store.ActionResult{}, err
	}
	return do(ctx, f, actor(c), store.ActionOptions{DryRun: r.DryRun, Confirm: r.Confirm, Limit: r.Limit})
}

func (o storeOps) Acknowledge(ctx context.Context, c console.Caller, r console.ActionRequest) (store.ActionResult, error) {
	return o.bulk(ctx, c, console.ActAcknowledge, r, o.st.Acknowledge)
}

func (o storeOps) Delete(ctx context.Context, c console.Caller, r console.ActionRequest) (store.ActionResult, error) {
	return o.bulk(ctx, c, console.ActDelete, r, o.st.Delete)
}

func (o storeOps) StartReplay(ctx context.Context, c console.Caller, r console.ReplayRequest) (replay.Task, error) {
	if err := console.Authorize(c.Principal, console.ActStartReplay); err != nil {
		return replay.Task{}, err
	}
	if r.Filter != nil {
		f, err := o.scoped(c, *r.Filter)
		if err != nil {
			return replay.Task{}, err
		}
		r.Filter = &f
	}
	r.Scope = c.Principal.Queues
	return o.rp.Start(ctx, r.Request, actor(c))
}

func (o storeOps) GetReplay(ctx context.Context, c console.Caller, id int64) (replay.Task, error) {
	t, err := o.rp.Get(ctx, id)
	if err == nil && !replay.Visible(t.Request.Scope, c.Principal.Queues) {
		return replay.Task{}, store.ErrNotFound
	}
	return t, err
}

func (o storeOps) ListReplays(ctx context.Context, c console.Caller, limit int) ([]replay.Task, error) {
	return o.rp.ListIn(ctx, limit, c.Principal.Queues)
}

func (o storeOps) CancelReplay(ctx context.Context, c console.Caller, id int64) (replay.Task, error) {
	if err := console.Authorize(c.Principal, console.ActCancelReplay); err != nil {
		return replay.Task{}, err
	}
	return o.rp.CancelIn(ctx, id, c.Principal.Queues, actor(c))
}

func (o storeOps) Groups(ctx context.Context, c console.Caller, q store.GroupQuery) ([]store.Group, error) {
	q.Scope = c.Principal.Queues
	return o.st.Groups(ctx, q)
}

func (o storeOps) Group(ctx context.Context, c console.Caller, id string) (store.Group, error) {
	return o.st.GetGroup(ctx, id, c.Principal.Queues)
}

func (o storeOps) Stats(ctx context.Context, c console.Caller) (store.Stats, error) {
	return o.st.Stats(ctx, c.Principal.Queues)
}

func (o storeOps) Status(ctx context.Context, c console.Caller) (console.StatusView, error) {
	at, qs, err := o.st.QueueSummary(ctx, c.Principal.Queues)
	return console.StatusView{At: at, Queues: qs}, err
}

func (o storeOps) Audit(ctx context.Context, c console.Caller, q console.AuditRequest) (console.AuditPage, error) {
	if err := console.Authorize(c.Principal, console.ActAudit); err != nil {
		return console.AuditPage{}, err
	}
	p, err := o.st.Audit(ctx, store.AuditQuery{Actor: q.Actor, Action: q.Action, Since: q.Since, Limit: q.Limit})
	return console.AuditPage{Entries: p.Entries, HasMore: p.HasMore}, err
}

func (o storeOps) Jobs(context.Context, console.Caller) (cleanup.JobsView, error) {
	return cleanup.JobsView{}, console.ErrUnavailable
}

func (o storeOps) Alerts(context.Context, console.Caller) (cleanup.AlertsView, error) {
	return cleanup.AlertsView{}, console.ErrUnavailable
}

func (o storeOps) Arrivals(ctx context.Context, c console.Caller) (store.HourlyArrivals, error) {
	return o.st.Arrivals(ctx, c.Principal.Queues)
}
