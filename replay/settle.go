package replay

import (
	"context"
	"time"

	"github.com/dlq/dlq/store"
)

func (r *taskRun) record(_ *claimBatch, o store.ReplayOutcome, label string) {
	if label != "" {
		r.s.metrics.replays.WithLabelValues(label).Inc()
	}
	r.mu.Lock()
	r.outcomes = append(r.outcomes, o)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// release hands claimed, unpublished messages back: pending again, still
// unsettled for the task, so it (or whoever resumes it) takes them again.
func (r *taskRun) release(b *claimBatch, msgs []store.ClaimedMessage) {
	for _, m := range msgs {
		r.record(b, store.ReplayOutcome{ID: m.ID, Token: b.token, Result: store.OutcomeReleased}, "")
	}
}

// waitBacklog keeps the outcomes awaiting settlement bounded: publishing
// waits for the database rather than the other way round.
func (r *taskRun) waitBacklog(ctx context.Context) error {
	limit := max(r.s.cfg.BatchSize, r.s.cfg.Window)
	return r.waitFor(ctx, func() bool { return len(r.outcomes) < limit })
}

// waitSettled returns once every claimed message is settled.
func (r *taskRun) waitSettled(ctx context.Context) error {
	return r.waitFor(ctx, func() bool { return r.unsettled == 0 })
}

func (r *taskRun) waitFor(ctx context.Context, cond func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.changed.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !cond() {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		r.changed.Wait()
	}
	return nil
}

// settlers is how many settlement transactions every run has going at once.
const settlers = 3

// settleLinger is how long a settler waits for a batch of outcomes to fill
// before recording fewer. Confirms arrive a few at a time, and with several
// settlers each took whatever was there: hundreds of small settlement
// transactions per 100,000 messages, each paying a commit and a round trip.
const settleLinger = 20 * time.Millisecond

// settler records outcomes in batches: while one transaction runs, the
// next batch gathers, so batches grow with the rate.
func (r *taskRun) settler(ctx context.Context) {
	for {
		r.linger(ctx)
		r.mu.Lock()
		outs := r.outcomes
		r.outcomes = nil
		r.mu.Unlock()
		if len(outs) > 0 {
			r.settle(ctx, outs)
			continue
		}
		select {
		case <-r.kick:
		case <-ctx.Done():
			r.mu.Lock()
			left := len(r.outcomes)
			r.mu.Unlock()
			if left == 0 {
				return
			}
		}
	}
}

// linger waits until a batch of outcomes is waiting, settleLinger has
// passed, or the run is stopping. Nothing waits when no outcome is there:
// the settler then blocks on its kick as before.
func (r *taskRun) linger(ctx context.Context) {
	full := func() (waiting, enough bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.outcomes) > 0, len(r.outcomes) >= r.s.cfg.BatchSize
	}
	waiting, enough := full()
	if !waiting || enough || ctx.Err() != nil {
		return
	}
	t := time.NewTimer(settleLinger)
	defer t.Stop()
	for !enough {
		select {
		case <-r.kick:
			_, enough = full()
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (r *taskRun) settle(ctx context.Context, outs []store.ReplayOutcome) {
	// Claims whose every outcome is recorded lose their write-ahead mark in
	// a later settlement: with two settlers, only then is it sure that no
	// row of the claim is still being recorded by the other one.
	r.mu.Lock()
	finished := r.doneTokens
	r.doneTokens = nil
	r.mu.Unlock()
	backoff := 100 * time.Millisecond
	for {
		// Outcomes are recorded even while the run is stopping; only the
		// drain's own deadline (ctx) gives up on them.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		res, err := r.s.st.SettleReplayOutcomes(sctx, r.task.ID, outs, r.canary.Load(), finished...)
		cancel()
		if err == nil {
			if missed := res.Published + res.Failed + res.Unknown + res.Retried + res.Released - res.Marked; missed > 0 {
				r.log.Debug("some rows had changed before their outcome was recorded (died again first, or claim taken back)", "rows", missed)
			}
			finished = nil
			break
		}
		if ctx.Err() != nil {
			r.log.Error("giving up recording outcomes; their claims keep their marks, and are taken back after their lease as maybe published",
				"messages", len(outs), "error", err)
			r.gaveUp(finished)
			return
		}
		r.log.Warn("cannot record replay outcomes; retrying", "messages", len(outs), "error", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	r.mu.Lock()
	r.doneTokens = append(r.doneTokens, finished...)
	for _, o := range outs {
		if b := r.batches[o.Token]; b != nil {
			b.open--
			if b.open == 0 {
				delete(r.batches, o.Token)
				r.doneTokens = append(r.doneTokens, o.Token)
			}
		}
	}
	r.unsettled -= len(outs)
	r.changed.Broadcast()
	r.mu.Unlock()
}

// gaveUp ends a settlement that could not be recorded. Its claims stay
// open: their rows are still replaying, and their write-ahead marks must
// stay, so that recovery, once their lease runs out, takes the marked rows
// as maybe published (unknown, or sent again within the task's retries).
// Counted as ended, the claims would lose their marks (dropMarks), and
// recovery would return published messages to the task as never sent: it
// would publish them again as first attempts, a duplicate counted nowhere,
// even with on_unknown hold. The claims whose marks this settlement was to
// drop (finished) had every outcome recorded earlier: they are still done.
func (r *taskRun) gaveUp(finished []string) {
	r.mu.Lock()
	r.doneTokens = append(r.doneTokens, finished...)
	r.mu.Unlock()
}

// dropMarks drops the write-ahead marks of the claims that ended after the
// last settlement.
func (r *taskRun) dropMarks(ctx context.Context) {
	r.mu.Lock()
	tokens := r.doneTokens
	r.doneTokens = nil
	r.mu.Unlock()
	if len(tokens) == 0 {
		return
	}
	if err := r.s.st.DropReplayClaimMarks(ctx, tokens); err != nil {
		r.log.Warn("cannot drop finished claim marks; they stay until the task is deleted", "error", err)
	}
}
