package replay

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/dlq/dlq/store"
)

// stillHeld reports whether the batch's claim may still be published
// from. Within its deadline it is. Past it (the heartbeat is late: a slow
// database, a stalled process), the claim is looked at again: renewed if
// its lease has not run out in the database, lost otherwise — it may have
// been taken back and handed to another runner, whose copy of these rows
// must be the only one published. A renewal that took so long that its
// own deadline has passed too does not let a publish through: by then
// recovery may have taken the claim back, renewed or not.
func (r *taskRun) stillHeld(ctx context.Context, b *claimBatch) bool {
	r.mu.Lock()
	deadline := b.deadline
	r.mu.Unlock()
	if time.Now().Before(deadline) {
		return true
	}
	start := time.Now()
	_, renewed, err := r.s.st.RenewReplayLease(ctx, r.task.ID, r.owner, []string{b.token}, r.s.cfg.Lease)
	if err != nil || !slices.Contains(renewed, b.token) {
		return false
	}
	deadline = start.Add(r.fenceLease())
	r.mu.Lock()
	b.deadline = deadline
	r.mu.Unlock()
	return time.Now().Before(deadline)
}

// fenceLease is how long after a claim (or renewal) statement started its
// holder keeps publishing: the lease minus a quarter, so a publish under
// way when the time runs out still lands before anyone can take the claim
// back.
func (r *taskRun) fenceLease() time.Duration {
	return r.s.cfg.Lease - r.s.cfg.Lease/4
}

// heartbeat renews the task's lease and its claims every Lease/3, notices
// a cancel made where no notification reached, and refreshes the progress
// gauges.
func (r *taskRun) heartbeat(ctx context.Context) {
	lease := r.s.cfg.Lease
	renew := time.NewTicker(max(lease/3, 10*time.Millisecond))
	defer renew.Stop()
	progress := time.NewTicker(2 * time.Second)
	defer progress.Stop()
	r.refreshProgress(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-progress.C:
			r.refreshProgress(ctx)
		case <-renew.C:
			r.renew(ctx)
		}
	}
}

// renew renews the task's lease and its claims once, and notices a
// cancel.
func (r *taskRun) renew(ctx context.Context) {
	r.mu.Lock()
	tokens := make([]string, 0, len(r.batches))
	for t := range r.batches {
		tokens = append(tokens, t)
	}
	r.mu.Unlock()
	start := time.Now()
	status, renewed, err := r.s.st.RenewReplayLease(ctx, r.task.ID, r.owner, tokens, r.s.cfg.Lease)
	switch {
	case errors.Is(err, store.ErrReplayLeaseLost):
		r.stop(errLeaseLost)
	case err != nil:
		if ctx.Err() == nil {
			r.log.Warn("cannot renew the task's lease; publishing stops when the claims' time runs out", "error", err)
		}
	default:
		// Only the claims still held: one whose lease ran out keeps its
		// past deadline, and publishes nothing more.
		r.mu.Lock()
		for _, t := range renewed {
			if b := r.batches[t]; b != nil {
				b.deadline = start.Add(r.fenceLease())
			}
		}
		r.mu.Unlock()
		if status == store.TaskCancelled {
			r.stop(errCancelled)
		}
	}
}

// retireProgress leaves a finished task's final progress in the gauges
// for ProgressRetention; a task handed back (to be resumed elsewhere, or
// lost) loses its gauges here at once.
func (r *taskRun) retireProgress(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t, err := r.s.st.GetReplayTask(ctx, r.task.ID)
	if err != nil || !store.TaskFinished(t.Status) {
		r.s.metrics.dropProgress(r.task.ID)
		return
	}
	r.s.metrics.retireProgress(taskOf(t), r.s.cfg.ProgressRetention)
}

func (r *taskRun) refreshProgress(ctx context.Context) {
	if t, err := r.s.st.GetReplayTask(ctx, r.task.ID); err == nil {
		r.s.metrics.setProgress(taskOf(t))
	}
}
