package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// MessageReplay is one replay task that selected a message: the task,
// and what became of the message in it.
type MessageReplay struct {
	Task replay.Task
	// Outcome is published, failed, unknown or skipped; "" while the task
	// has not come to the message.
	Outcome string
	// Detail is the error or the skip reason, when there is one.
	Detail string
}

// MessageReplaysMax is how many replays of one message MessageReplays
// returns at most, the newest.
const MessageReplaysMax = 20

// clockSlack widens the window of tasks looked through: a message's first
// failure time is the broker's clock, a task's creation PostgreSQL's.
const clockSlack = time.Hour

// MessageReplays lists the replay tasks that selected message id, newest
// first, at most MessageReplaysMax: those the caller may see
// (TaskVisible), of a message within its scope (outside it the message is
// store.ErrNotFound, as GetMessage answers). firstFailed is the message's
// first failure (no earlier task can have selected it). complete is false
// when older tasks may be missing: the store looks through the newest
// store.MessageReplaysScanMax tasks since then.
func (s *Service) MessageReplays(ctx context.Context, c Caller, id int64, firstFailed time.Time) (replays []MessageReplay, complete bool, err error) {
	p := c.Principal
	if err := Authorize(p, ActGetMessage); err != nil {
		return nil, false, err
	}
	if err := Authorize(p, ActGetReplay); err != nil {
		return nil, false, err
	}
	if s.cfg.Replays == nil {
		return nil, false, unavailable("replays are not available on this instance")
	}
	found, err := s.st.MessagesExist(ctx, []int64{id}, p.Queues)
	if err != nil {
		return nil, false, err
	}
	if !found[id] {
		return nil, false, fmt.Errorf("message %d: %w", id, store.ErrNotFound)
	}
	items, complete, err := s.st.MessageReplays(ctx, id, firstFailed.Add(-clockSlack), store.MessageReplaysScanMax)
	if err != nil {
		return nil, false, err
	}
	for _, it := range items {
		if len(replays) == MessageReplaysMax {
			complete = false
			break
		}
		t, err := s.cfg.Replays.Get(ctx, it.TaskID)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile (replay.task_ttl)
		}
		if err != nil {
			return nil, false, err
		}
		if TaskVisible(p, t) {
			replays = append(replays, MessageReplay{Task: t, Outcome: it.Outcome, Detail: it.Detail})
		}
	}
	return replays, complete, nil
}

// GroupReplays is what became of a failure group's replays, as the
// caller may see them.
type GroupReplays struct {
	// Last is the newest replay task that included messages of the group:
	// one that selected the group by its filter, or one that claimed
	// messages of the group whatever it selected (their queue, ids, an
	// approval's snapshot). nil when the caller may see none.
	Last *replay.Task
	// DiedSinceLast: messages of the group died after Last began
	// publishing some of them (the group's last death is later).
	DiedSinceLast bool
	// FailedAgain counts the group's pending messages that were replayed
	// before and died again, whichever task replayed them. The last of
	// them died at FailedAgainAt, after FailedAgainTask had replayed it
	// (nil: not known, or not a task the caller may see).
	FailedAgain     int64
	FailedAgainAt   time.Time
	FailedAgainTask *replay.Task
	// Partial: the group holds more messages than were read
	// (store.GroupReplayScanMax of each status), so an older message may
	// name a newer task, and FailedAgain is a lower bound.
	Partial bool
	// LastReason is the most frequent reason Last could not publish some
	// of its messages (nil when it published or skipped them all, or when
	// it is larger than groupReasonBudget: its own page counts them), and
	// LastAdvice what to do about it (ReplayErrorAdvice).
	LastReason *store.ReplayErrorCount
	LastAdvice string
}

// groupReasonBudget bounds the task whose reasons a group's page counts:
// counting reads every item of the task, and a group's page is shown and
// refreshed often; a larger task's page counts them.
const groupReasonBudget = 20_000

// GroupReplays reads the replays of failure group id within the caller's
// scope (outside it the group is store.ErrNotFound, as Group answers):
// its last replay (GroupReplays.Last) and its messages that died again
// after one. A task filtered on the group is found among the newest
// store.MessageReplaysScanMax tasks; any other through the messages it
// claimed (store.Store.GroupReplays).
func (s *Service) GroupReplays(ctx context.Context, c Caller, id string) (GroupReplays, error) {
	p := c.Principal
	for _, act := range []Action{ActGroups, ActGetReplay} {
		if err := Authorize(p, act); err != nil {
			return GroupReplays{}, err
		}
	}
	if s.cfg.Replays == nil {
		return GroupReplays{}, unavailable("replays are not available on this instance")
	}
	if _, err := store.ParseGroupID(id); err != nil {
		return GroupReplays{}, invalid("id: %q must be a group id (16 hex digits)", id)
	}
	g, err := s.st.GetGroup(ctx, id, p.Queues)
	if err != nil {
		return GroupReplays{}, err
	}
	byFilter, _, err := s.st.LatestGroupReplay(ctx, id, store.MessageReplaysScanMax)
	if err != nil {
		return GroupReplays{}, err
	}
	rows, err := s.st.GroupReplays(ctx, id, g.SourceQueue, store.GroupReplayScanMax)
	if err != nil {
		return GroupReplays{}, err
	}
	out := GroupReplays{FailedAgain: rows.FailedAgain, FailedAgainAt: rows.FailedAgainAt, Partial: rows.Partial}
	// The newer of the two first; the other when the caller may not see it.
	for _, taskID := range []int64{max(byFilter, rows.LastTaskID), min(byFilter, rows.LastTaskID)} {
		if out.Last != nil || taskID == 0 {
			continue
		}
		if out.Last, err = s.visibleTask(ctx, p, taskID); err != nil {
			return GroupReplays{}, err
		}
	}
	if out.Last != nil {
		out.DiedSinceLast = diedSince(*out.Last, g.LastSeen)
		if err := s.lastReason(ctx, &out); err != nil {
			return GroupReplays{}, err
		}
	}
	switch {
	case rows.FailedAgainTask == 0:
	case out.Last != nil && out.Last.ID == rows.FailedAgainTask:
		out.FailedAgainTask = out.Last
	default:
		if out.FailedAgainTask, err = s.visibleTask(ctx, p, rows.FailedAgainTask); err != nil {
			return GroupReplays{}, err
		}
	}
	return out, nil
}

// lastReason reads the most frequent reason rs.Last could not publish
// some of its messages, and what to do about it.
func (s *Service) lastReason(ctx context.Context, rs *GroupReplays) error {
	t := rs.Last
	if t.Failed+t.Unknown == 0 || t.Requested > groupReasonBudget {
		return nil
	}
	reasons, _, err := s.st.ReplayErrors(ctx, t.ID, 1)
	if err != nil || len(reasons) == 0 {
		return err
	}
	rs.LastReason, rs.LastAdvice = &reasons[0], ReplayErrorAdvice(reasons[0].Error)
	return nil
}

// visibleTask reads task id; nil when it is gone (replay.task_ttl) or the
// caller may not see it.
func (s *Service) visibleTask(ctx context.Context, p auth.Principal, id int64) (*replay.Task, error) {
	t, err := s.cfg.Replays.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !TaskVisible(p, t) {
		return nil, nil
	}
	return &t, nil
}

// diedSince reports whether messages of a group whose last death was at
// lastSeen died after replay t began publishing some of them: the replay
// did not fix what failed.
func diedSince(t replay.Task, lastSeen time.Time) bool {
	if t.Published == 0 {
		return false
	}
	began := t.CreatedAt
	if t.StartAt.After(began) {
		began = t.StartAt
	}
	return lastSeen.After(began)
}
