package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// ApprovalNow is what approving a pending request would act on if it were
// approved now. The request's count is what its selection matched when it
// was asked for; since then, messages of its snapshot may have been
// replayed, acknowledged or deleted, and approving leaves those as they
// are (a replay skips them as not_pending).
type ApprovalNow struct {
	// Count is how many of the snapshot's messages the action would act
	// on now: a replay's remaining messages as its dry run counts them;
	// the messages an acknowledge or delete would change.
	Count int64
	// Skipped breaks a replay's other messages down by the reason its task
	// would skip them (replay.Task's skip_reasons: not_pending,
	// max_replays); nil for an acknowledge or a delete, and messages
	// deleted since are in neither.
	Skipped map[string]int64
}

// approvalNow counts what approving the pending request a would act on
// now, as the approval would run it (Approve): on its snapshot, within
// its requester's scope, through the replay service's dry run or the
// action's. It reads the snapshot's rows by their keys (approval_items,
// at most the request's count) and changes nothing. nil when replays are
// not available on this instance, or the replay would be refused now.
func (s *Service) approvalNow(ctx context.Context, a store.Approval) (*ApprovalNow, error) {
	snapshot := store.Filter{Approval: a.ID, Status: "all", Scope: a.Scope}
	switch a.Action {
	case store.ActionAcknowledge, store.ActionDelete:
		do := s.st.Acknowledge
		if a.Action == store.ActionDelete {
			do = s.st.Delete
		}
		res, err := do(ctx, snapshot, requester(a), store.ActionOptions{DryRun: true})
		if err != nil {
			return nil, fmt.Errorf("ops: count what approval %d would %s now: %w", a.ID, a.Action, err)
		}
		return &ApprovalNow{Count: res.Matched - res.Unchanged}, nil
	}
	if s.cfg.Replays == nil {
		return nil, nil
	}
	var r ReplayRequest
	if err := json.Unmarshal(a.Request, &r); err != nil {
		return nil, fmt.Errorf("ops: read the request of approval %d: %w", a.ID, err)
	}
	req := r.Request
	// As Approve starts it; a start time now past changes no count.
	req.DryRun, req.Scope, req.Approval, req.Approver, req.StartAt = true, a.Scope, a.ID, nil, nil
	t, err := s.cfg.Replays.Start(ctx, req, requester(a))
	if errors.Is(err, replay.ErrInvalidRequest) {
		// The request no longer passes this instance's checks (its limit
		// above a lowered max_task_messages, say): approving it would be
		// refused with the reason, and there is nothing to count.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ops: count what approval %d would replay now: %w", a.ID, err)
	}
	return &ApprovalNow{Count: t.Remaining, Skipped: t.SkipReasons}, nil
}

// staleSample says, for each message of sample that approving a now would
// leave as it is, why: its status now is not one the action acts on.
func staleSample(a store.Approval, sample []store.Message) map[int64]string {
	eligible := store.EligibleStatuses(a.Action)
	var out map[int64]string
	for _, m := range sample {
		if slices.Contains(eligible, m.Status) {
			continue
		}
		if out == nil {
			out = map[int64]string{}
		}
		out[m.ID] = fmt.Sprintf("%s now: the %s leaves it as it is", m.Status, a.Action)
	}
	return out
}
