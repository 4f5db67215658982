package ops

import (
	"context"
	"fmt"

	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// ReplayRequest asks for a replay. Its JSON form is the body of POST
// /api/v1/replays and the fields of the control queue's replay command.
type ReplayRequest struct {
	replay.Request
	// Confirm lets a replay by filter select more than the threshold.
	Confirm bool `json:"confirm"`
	// Command, when set, records the control command's answer in the
	// task's own transaction, so a repeated command_id finds it.
	Command *CommandRecord `json:"-"`
}

// CommandRecord is a control command whose answer is recorded with the
// task it starts.
type CommandRecord struct {
	ID     string
	Answer func(replay.Task) (string, error)
}

// StartReplay records a replay task (or answers a dry run) for messages
// within the caller's scope. An id that names no message is an item of
// the task skipped as deleted (replay.Request's ids); but for a scoped
// caller, an id outside its scope is not found, as GetMessage answers it
// (docs/API.md), and so, that nothing tells the two apart, is an id of no
// message at all. A replay by filter that would publish more than
// the threshold needs Confirm: it is counted first with the replay
// service's own dry run (what would be replayed, skips left out). Messages
// arriving between the count and the start can push a task a little past
// the threshold: this guards against a mistaken filter; limit is the hard
// cap.
func (s *Service) StartReplay(ctx context.Context, c Caller, r ReplayRequest) (replay.Task, error) {
	p := c.Principal
	if err := Authorize(p, ActStartReplay); err != nil {
		return replay.Task{}, err
	}
	if s.cfg.Replays == nil {
		return replay.Task{}, unavailable("replays are not available on this instance")
	}
	req := r.Request
	sel, err := Selection(req.IDs, req.Filter)
	if err != nil {
		return replay.Task{}, err
	}
	if err := s.mayFilterBodies(p, sel); err != nil {
		return replay.Task{}, err
	}
	if err := s.checkSearch(sel); err != nil {
		return replay.Task{}, err
	}
	if err := s.checkRefs(ctx, c, sel); err != nil {
		return replay.Task{}, err
	}
	if req.Limit < 0 {
		return replay.Task{}, invalid("limit: %d must be >= 0", req.Limit)
	}
	if p.Queues != nil {
		// The service restricts the selection to the scope in SQL too.
		req.Scope = p.Queues
		if req.Filter != nil {
			sf, err := scoped(p, *req.Filter)
			if err != nil {
				return replay.Task{}, err
			}
			req.Filter = &sf
		}
		if err := s.idsInScope(ctx, req.IDs, p.Queues); err != nil {
			return replay.Task{}, err
		}
	}
	actor := c.actor()
	confirm := req.Filter != nil && !r.Confirm && s.cfg.ConfirmAbove > 0 &&
		(req.Limit == 0 || int64(req.Limit) > s.cfg.ConfirmAbove)
	approval := s.cfg.ApprovalAbove > 0 && req.Approval == 0
	if !req.DryRun && (confirm || approval) {
		dry := req
		dry.DryRun = true
		t, err := s.cfg.Replays.Start(ctx, dry, actor)
		if err != nil {
			return replay.Task{}, err
		}
		if t.Error == "" && confirm {
			if err := needsConfirm(t.Remaining, s.cfg.ConfirmAbove, false); err != nil {
				return replay.Task{}, err
			}
		}
		if t.Error == "" && approval {
			sel := store.Filter{IDs: req.IDs, Status: "all", Scope: req.Scope}
			if req.Filter != nil {
				sel = *req.Filter
				sel.Scope = req.Scope
			}
			if err := s.needsApproval(ctx, c, "replay", t.Remaining, r, sel, req.Limit); err != nil {
				return replay.Task{}, err
			}
		}
	}
	if r.Command != nil && !req.DryRun {
		return s.cfg.Replays.StartCommand(ctx, req, actor, r.Command.ID, r.Command.Answer)
	}
	t, err := s.cfg.Replays.Start(ctx, req, actor)
	if err == nil && req.DryRun && t.Error == "" && req.Approval == 0 {
		// What the real replay's threshold counts, as above. A dry run
		// with an error says the replay would be refused for it: approval
		// would not come into it.
		t.DryRunApproval = s.dryRunApproval(c, "replay", t.Remaining)
	}
	return t, err
}

// TargetCheck is what the broker says now of where a replay publishes,
// looked at before it runs: a target the broker does not have publishes
// nothing, every message failing and staying pending.
type TargetCheck struct {
	// MissingExchange is the target exchange when the broker does not
	// have it: every publish would fail.
	MissingExchange string
	// MissingQueue is, for a target through the default exchange (""),
	// the queue its routing key names when the broker has none of that
	// name: the default exchange routes only there, so every publish
	// would be returned unroutable (312 NO_ROUTE).
	MissingQueue string
	// Advice says what to do about it ("" when nothing is missing).
	Advice string
}

// Missing reports whether the replay would publish nothing.
func (t TargetCheck) Missing() bool { return t.MissingExchange != "" || t.MissingQueue != "" }

// CheckReplayTarget looks at a replay's target on the broker now (a
// passive declare on a channel of its own, as the task looks before it
// publishes): its exchange, or, through the default exchange, the queue
// its routing key names. A nil target (each message's source) is not
// looked at. Nothing missing when it exists, or when this instance cannot
// tell (no broker connection, the broker unreachable or blocked: the
// error says so): the task itself looks again before publishing.
func (s *Service) CheckReplayTarget(ctx context.Context, c Caller, target *replay.Target) (TargetCheck, error) {
	if err := Authorize(c.Principal, ActStartReplay); err != nil {
		return TargetCheck{}, err
	}
	if s.cfg.Replays == nil {
		return TargetCheck{}, unavailable("replays are not available on this instance")
	}
	if target == nil {
		return TargetCheck{}, nil
	}
	for _, f := range []struct{ field, value string }{{"target.exchange", target.Exchange}, {"target.routing_key", target.RoutingKey}} {
		if err := CheckText(f.field, f.value); err != nil {
			return TargetCheck{}, err
		}
		if len(f.value) > 255 {
			// An AMQP short string: the replay refuses it before any look.
			return TargetCheck{}, invalid("%s must be at most 255 bytes", f.field)
		}
	}
	if target.Exchange == "" {
		if target.RoutingKey == "" {
			// The replay refuses it (no queue named): nothing to look at.
			return TargetCheck{}, nil
		}
		exists, err := s.cfg.Replays.QueueExists(ctx, target.RoutingKey)
		if err != nil {
			return TargetCheck{}, fmt.Errorf("ops: look up queue %q (the default exchange's routing key): %w", target.RoutingKey, err)
		}
		if exists {
			return TargetCheck{}, nil
		}
		return TargetCheck{MissingQueue: target.RoutingKey, Advice: adviceNoQueue}, nil
	}
	exists, err := s.cfg.Replays.ExchangeExists(ctx, target.Exchange)
	if err != nil {
		return TargetCheck{}, fmt.Errorf("ops: look up exchange %q: %w", target.Exchange, err)
	}
	if exists {
		return TargetCheck{}, nil
	}
	return TargetCheck{MissingExchange: target.Exchange, Advice: adviceNoExchange}, nil
}

// idsInScope answers ids outside scope as missing, exactly like
// GetMessage does: ids of messages that do not exist included, which a
// scoped caller must not tell from those of other queues.
func (s *Service) idsInScope(ctx context.Context, ids []int64, scope []string) error {
	if len(ids) == 0 {
		return nil
	}
	found, err := s.st.MessagesExist(ctx, ids, scope)
	if err != nil {
		return err
	}
	var missing []int64
	for _, id := range ids {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("messages %v: %w", missing, store.ErrNotFound)
	}
	return nil
}

// GetReplay returns a task the caller may see (TaskVisible); any other is
// store.ErrNotFound, so its existence is not revealed.
func (s *Service) GetReplay(ctx context.Context, c Caller, id int64) (replay.Task, error) {
	if err := Authorize(c.Principal, ActGetReplay); err != nil {
		return replay.Task{}, err
	}
	if s.cfg.Replays == nil {
		return replay.Task{}, unavailable("replays are not available on this instance")
	}
	t, err := s.cfg.Replays.Get(ctx, id)
	if err != nil {
		return replay.Task{}, err
	}
	if !TaskVisible(c.Principal, t) {
		return replay.Task{}, fmt.Errorf("replay %d: %w", id, store.ErrNotFound)
	}
	return t, nil
}

// ListReplays returns the newest limit tasks the caller may see (limit 0:
// 50; at most 1000), newest first. Tasks hidden from a scoped caller do not
// count against the limit.
func (s *Service) ListReplays(ctx context.Context, c Caller, limit int) ([]replay.Task, error) {
	return s.listReplays(ctx, c, limit, false)
}

// ListActiveReplays lists the tasks not finished yet (scheduled, running,
// waiting on their canary) the caller may see, newest first, however many
// finished tasks came after them: the ones an operator may have to watch
// or cancel.
func (s *Service) ListActiveReplays(ctx context.Context, c Caller, limit int) ([]replay.Task, error) {
	return s.listReplays(ctx, c, limit, true)
}

func (s *Service) listReplays(ctx context.Context, c Caller, limit int, unfinished bool) ([]replay.Task, error) {
	if err := Authorize(c.Principal, ActListReplays); err != nil {
		return nil, err
	}
	if s.cfg.Replays == nil {
		return nil, unavailable("replays are not available on this instance")
	}
	if limit == 0 {
		limit = 50
	}
	if limit < 1 || limit > 1000 {
		return nil, invalid("limit: %d must be a whole number from 1 to 1000", limit)
	}
	out := []replay.Task{}
	// Read pages of the newest tasks until limit visible ones are found or
	// none are left. A scoped caller reads at most a few pages more than it
	// keeps: tasks are few (they are deleted after replay.task_ttl).
	var before int64
	for len(out) < limit {
		list := s.cfg.Replays.List
		if unfinished {
			list = s.cfg.Replays.ListUnfinished
		}
		page, err := list(ctx, before, limit)
		if err != nil {
			return nil, err
		}
		for _, t := range page {
			if TaskVisible(c.Principal, t) && len(out) < limit {
				out = append(out, t)
			}
		}
		if len(page) < limit {
			break
		}
		before = page[len(page)-1].ID
	}
	return out, nil
}

// CancelReplay stops a task the caller may see; any other is
// store.ErrNotFound. The visibility is checked under the task's lock.
func (s *Service) CancelReplay(ctx context.Context, c Caller, id int64) (replay.Task, error) {
	if err := Authorize(c.Principal, ActCancelReplay); err != nil {
		return replay.Task{}, err
	}
	if s.cfg.Replays == nil {
		return replay.Task{}, unavailable("replays are not available on this instance")
	}
	return s.cfg.Replays.Cancel(ctx, id, c.actor(), func(t replay.Task) error {
		if !TaskVisible(c.Principal, t) {
			return fmt.Errorf("replay %d: %w", id, store.ErrNotFound)
		}
		return nil
	})
}

// ReplayStatus is GetReplay with, once the task finished with failed or
// unknown messages, their reasons (Errors): the answer of a status read,
// which must say why a replay did not deliver, not only how many.
func (s *Service) ReplayStatus(ctx context.Context, c Caller, id int64) (replay.Task, error) {
	t, err := s.GetReplay(ctx, c, id)
	if err != nil || !store.TaskFinished(t.Status) || t.Failed+t.Unknown == 0 {
		return t, err
	}
	reasons, _, err := s.st.ReplayErrors(ctx, id, 20)
	if err != nil {
		return replay.Task{}, fmt.Errorf("replay %d: read why its messages failed: %w", id, err)
	}
	t.Errors = reasons
	return t, nil
}

// ReplayErrors are why a task the caller may see could not publish some
// of its messages: the recorded errors of its failed and unknown
// messages, most frequent first, at most limit (0: 20) of them, and how
// many messages the reasons left out hold. List the messages of one with
// the filter {replay_task, replay_outcome, replay_error}.
func (s *Service) ReplayErrors(ctx context.Context, c Caller, id int64, limit int) ([]store.ReplayErrorCount, int64, error) {
	t, err := s.GetReplay(ctx, c, id)
	if err != nil {
		return nil, 0, err
	}
	if t.Failed+t.Unknown == 0 {
		return []store.ReplayErrorCount{}, 0, nil
	}
	if limit <= 0 {
		limit = 20
	}
	reasons, rest, err := s.st.ReplayErrors(ctx, id, limit)
	if reasons == nil && err == nil {
		reasons = []store.ReplayErrorCount{}
	}
	return reasons, rest, err
}
