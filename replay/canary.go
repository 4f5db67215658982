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
			var err error
			if t.CanaryStartedAt == nil {
				if t, err = r.update(store.ReplayTaskUpdate{StartCanary: true}, store.TaskRunning); err != nil {
					return err
				}
			}
			r.canary.Store(true)
			for len(t.CanaryIDs) < t.CanaryCount {
				n, err := r.publishPhase(ctx, int64(t.CanaryCount-len(t.CanaryIDs)))
				if err != nil {
					return err
				}
				if t, err = r.s.st.GetReplayTask(ctx, t.ID); err != nil {
					return err
				}
				if n == 0 {
					break // nothing left to try
				}
			}
			r.canary.Store(false)
			if len(t.CanaryIDs) == 0 {
				if t.Remaining() == 0 {
					return nil // nothing could be published, and nothing is left
				}
				_, err := r.update(store.ReplayTaskUpdate{Status: store.TaskCanaryFailed, Finish: true,
					Error: fmt.Sprintf("canary: none of the first messages could be published (%d failed, %d unknown); the rest was not touched", t.Failed, t.Unknown)},
					store.TaskRunning)
				return errors.Join(errCanaryFailed, err)
			}
			wait := time.Duration(t.CanaryWaitSeconds) * time.Second
			if t, err = r.update(store.ReplayTaskUpdate{Status: store.TaskCanaryWait, CanaryWait: max(wait, time.Millisecond)}, store.TaskRunning); err != nil {
				return err
			}
			r.log.Info("canary published; watching for messages that die again", "canary", len(t.CanaryIDs), "wait", wait)
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
