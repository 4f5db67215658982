package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// LastGroupReplay returns the newest replay task of failure group id
// (one that selected the group by its filter) that the caller may see;
// ok is false when there is none among the newest
// store.MessageReplaysScanMax tasks.
func (s *Service) LastGroupReplay(ctx context.Context, c Caller, id string) (t replay.Task, ok bool, err error) {
	if err := Authorize(c.Principal, ActGroups); err != nil {
		return replay.Task{}, false, err
	}
	if err := Authorize(c.Principal, ActGetReplay); err != nil {
		return replay.Task{}, false, err
	}
	if s.cfg.Replays == nil {
		return replay.Task{}, false, unavailable("replays are not available on this instance")
	}
	if _, err := store.ParseGroupID(id); err != nil {
		return replay.Task{}, false, invalid("id: %q must be a group id (16 hex digits)", id)
	}
	taskID, ok, err := s.st.LatestGroupReplay(ctx, id, store.MessageReplaysScanMax)
	if err != nil || !ok {
		return replay.Task{}, false, err
	}
	t, err = s.cfg.Replays.Get(ctx, taskID)
	if errors.Is(err, store.ErrNotFound) {
		return replay.Task{}, false, nil
	}
	if err != nil {
		return replay.Task{}, false, err
	}
	if !TaskVisible(c.Principal, t) {
		return replay.Task{}, false, nil
	}
	return t, true, nil
}
