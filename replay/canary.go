package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlq/dlq/store"
)

// work runs the task's phases: canary (publish, wait, check), then the rest.
func (r *taskRun) work(ctx context.Context) error {
	t := r.task
	if t.CanaryCount > 0 && !t.CanaryPassed {
		if t.Status != store.TaskCanaryWait {
			var (
				done bool
				err  error
			)
			if t, done, err = r.publishCanary(ctx, t); err != nil || done {
				return err
			}
		}
		if t.CanaryUntil != nil {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Until(*t.CanaryUntil)):
			}
		}
		dead, err := r.s.st.CanaryDiedAgain(ctx, t.ID)
		if err != nil {
			return err
		}
		if len(dead) > 0 {
			_, err := r.update(store.ReplayTaskUpdate{Status: store.TaskCanaryFailed, Finish: true,
				Error: fmt.Sprintf("canary: %d of %d canary messages died again (ids %s); the other %d messages were not touched",
					len(dead), len(t.CanaryIDs), joinIDs(dead, 20), t.Remaining())}, store.TaskCanaryWait)
			return errors.Join(errCanaryFailed, err)
		}
		if _, err := r.update(store.ReplayTaskUpdate{Status: store.TaskRunning, CanaryPassed: true}, store.TaskCanaryWait); err != nil {
			return err
		}
		r.log.Info("canary passed; replaying the rest")
	}
	_, err := r.publishPhase(ctx, -1)
	return err
}

// publishCanary publishes the canary, the task's first CanaryCount
// messages tried, and then either stops the task (canary_failed) because
// one of them could not be published — failed, or its outcome unknown — or
// starts the canary's wait. done reports that the task has nothing left to
// do (every message was skipped).
//
// The canary is the first messages tried, whatever becomes of them:
// counted by those published, a target that refuses every message had the
// canary try each one, and the task complete without ever stopping. They
// are counted from the task's items, so that a runner resuming the canary
// of one that stopped goes on from where it stopped.
//
// A canary message that waits to be sent again (an unknown outcome or a
// nack, on_unknown retry) is sent again, and no other message with it,
// before the canary is judged: it is unknown, or failed, only once the
// task sent it as often as it may, as any message of the task. Judged
// while it waited, one confirm timeout failed the canary at once, the
// message settled unknown with none of its retries spent.
func (r *taskRun) publishCanary(ctx context.Context, t store.ReplayTask) (_ store.ReplayTask, done bool, err error) {
	if t.CanaryStartedAt == nil {
		if t, err = r.update(store.ReplayTaskUpdate{StartCanary: true}, store.TaskRunning); err != nil {
			return t, false, err
		}
	}
	var tried store.ReplayAttempts
	r.canary.Store(true)
	for {
		if tried, err = r.s.st.ReplayAttempts(ctx, t.ID); err != nil {
			return t, false, err
		}
		left := int64(t.CanaryCount) - tried.Tried()
		if left <= 0 {
			if tried.Waiting == 0 {
				break
			}
			if err := r.sendWaitingAgain(ctx); err != nil {
				return t, false, err
			}
			// Count again: the copies' outcomes are in, and a message
			// skipped meanwhile (no longer pending) leaves room for another.
			continue
		}
		n, err := r.publishPhase(ctx, left)
		if err != nil {
			return t, false, err
		}
		if n == 0 {
			break // nothing left to try: nothing waits to be sent again either
		}
	}
	r.canary.Store(false)
	if t, err = r.s.st.GetReplayTask(ctx, t.ID); err != nil {
		return t, false, err
	}
	if tried.Tried() == 0 && t.Remaining() == 0 {
		return t, true, nil // nothing could be tried, and nothing is left
	}
	if lost := tried.Failed + tried.Unknown; lost > 0 {
		rest := max(t.Requested-t.Skipped-tried.Tried(), 0)
		why := fmt.Sprintf("canary: %d of the first %d messages could not be published (%d failed, %d unknown); the other %d messages were not touched",
			lost, tried.Tried(), tried.Failed, tried.Unknown, rest)
		if tried.Published == 0 {
			why = fmt.Sprintf("canary: none of the first %d messages could be published (%d failed, %d unknown); the other %d messages were not touched",
				tried.Tried(), tried.Failed, tried.Unknown, rest)
		}
		_, err := r.update(store.ReplayTaskUpdate{Status: store.TaskCanaryFailed, Finish: true, Error: why}, store.TaskRunning)
		return t, false, errors.Join(errCanaryFailed, err)
	}
	wait := time.Duration(t.CanaryWaitSeconds) * time.Second
	if t, err = r.update(store.ReplayTaskUpdate{Status: store.TaskCanaryWait, CanaryWait: max(wait, time.Millisecond)}, store.TaskRunning); err != nil {
		return t, false, err
	}
	r.log.Info("canary published; watching for messages that die again", "canary", len(t.CanaryIDs), "wait", wait)
	return t, false, nil
}

func joinIDs(ids []int64, most int) string {
	var b strings.Builder
	for i, id := range ids {
		if i == most {
			fmt.Fprintf(&b, ", … %d more", len(ids)-most)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, id)
	}
	return b.String()
}
