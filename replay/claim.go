package replay

import (
	"context"
	"sync"
	"time"

	"github.com/dlq/dlq/store"
)

type claimBatch struct {
	token string
	msgs  []store.ClaimedMessage
	// deadline is when this instance stops trusting its claim: the lease
	// minus a margin, from before the statement that last set it. Past it,
	// nothing of the batch is published (guarded by taskRun.mu).
	deadline time.Time
	open     int // messages not settled yet (guarded by taskRun.mu)
	// marked is the index of the last message the claim's write-ahead mark
	// covers when the batch arrives (marked with the claim).
	marked int
}

// claimers is how many claims an unthrottled run has going at once.
const claimers = 3

// claimSize keeps claims short-lived at low rates: a batch holds about two
// seconds of publishing.
func (r *taskRun) claimSize() int {
	n := r.s.cfg.BatchSize
	if r.task.RatePerSecond > 0 {
		n = min(n, max(int(r.task.RatePerSecond*2), 1))
	}
	return n
}

// feed claims batches in id order and hands them to the publisher loop.
// When a pass over the task's items reaches the end it starts again from
// the beginning for the items it passed over (held by another claim at the
// time); when a whole pass finds nothing to do it waits for what is in
// flight, and stops once no item is left unsettled (with sel.retries: once
// none waits to be sent again).
//
// An unthrottled task claims three batches at once: a claim costs about
// as long as publishing a batch, and on a busy database claims vary so
// much that with two the publisher still waited for one (a quarter of a
// run, measured). Throttled tasks and canaries claim one at a time, which
// keeps their counts exact.
func (r *taskRun) feed(ctx context.Context, sel selection, out chan<- *claimBatch) (int64, error) {
	parallel := 1
	if sel.limit < 0 && !sel.retries && r.limiter == nil {
		parallel = claimers
	}
	f := &feeder{r: r, out: out, sem: make(chan struct{}, parallel), retries: sel.retries}
	next := r.s.st.ReplayItemsAfter
	if sel.retries {
		next = r.s.st.ReplayRetriesAfter
	}
	var cursor int64
	backoff := 100 * time.Millisecond
	for {
		if err := context.Cause(ctx); err != nil {
			return f.done(err)
		}
		select {
		case f.sem <- struct{}{}:
		case <-ctx.Done():
			return f.done(context.Cause(ctx))
		}
		n, ok := f.batchSize(sel.limit)
		if !ok {
			<-f.sem
			return f.done(nil)
		}
		ids, more, err := next(ctx, r.task.ID, cursor, n, r.s.cfg.BatchBytes, retryDelay)
		if err != nil {
			<-f.sem
			if ctx.Err() != nil {
				return f.done(context.Cause(ctx))
			}
			r.log.Warn("cannot read the task's next messages; retrying", "error", err, "retry_in", backoff)
			if err := sleep(ctx, backoff); err != nil {
				return f.done(err)
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if len(ids) > 0 {
			cursor = ids[len(ids)-1]
			f.start(ctx, ids)
		} else {
			<-f.sem
		}
		if more {
			continue
		}
		cursor = 0
		if finished, err := f.endOfPass(ctx); finished || err != nil {
			return f.done(err)
		}
	}
}

// feeder is one feed's state: the claims under way (at most cap(sem) at
// once) and what they claimed.
type feeder struct {
	r        *taskRun
	out      chan<- *claimBatch
	sem      chan struct{}
	retries  bool // only the items that wait to be sent again (selection)
	wg       sync.WaitGroup
	mu       sync.Mutex // guards progress and total
	progress bool
	total    int64
}

// done waits for the claims under way and returns what was claimed.
func (f *feeder) done(err error) (int64, error) {
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total, err
}

// batchSize is how many items the next claim asks for; false once a
// limited run has claimed its limit.
func (f *feeder) batchSize(limit int64) (int, bool) {
	n := f.r.claimSize()
	if limit < 0 {
		return n, true
	}
	// One claimer: the previous claim is done, total is exact.
	f.mu.Lock()
	left := limit - f.total
	f.mu.Unlock()
	if left <= 0 {
		return 0, false
	}
	return min(n, int(left)), true
}

// start claims ids in the background; the caller holds a slot of sem,
// which the claim gives back when it ends.
func (f *feeder) start(ctx context.Context, ids []int64) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer func() { <-f.sem }()
		claimed, skipped := f.r.claim(ctx, ids, f.out)
		f.mu.Lock()
		f.total += int64(claimed)
		f.progress = f.progress || claimed+skipped > 0
		f.mu.Unlock()
	}()
}

// endOfPass runs when a pass over the task's items reached the end. It
// returns at once when the pass moved anything (the next pass starts from
// the beginning); otherwise it waits for what is in flight, settles the
// items of deleted messages, and reports finished once no item is left.
func (f *feeder) endOfPass(ctx context.Context) (finished bool, err error) {
	r := f.r
	// Let the claims under way finish first.
	f.wg.Wait()
	f.mu.Lock()
	moved := f.progress
	f.progress = false
	f.mu.Unlock()
	if moved {
		return false, nil
	}
	if err := r.waitSettled(ctx); err != nil {
		return false, err
	}
	if n, err := r.s.st.SkipDeletedReplayItems(ctx, r.task.ID); err != nil {
		r.log.Warn("cannot settle items of deleted messages", "error", err)
	} else {
		// Skipped or unknown like those the claim settles, and counted
		// alike.
		r.countNotSent(n.Skipped, n.Unknown)
	}
	left, inFlight, err := f.left(ctx)
	if err != nil {
		r.log.Warn("cannot count what is left", "error", err)
	} else if left == 0 {
		return true, nil
	} else {
		r.log.Debug("items held by other claims; waiting for them", "left", left, "in_flight", inFlight)
	}
	if err := sleep(ctx, min(r.s.cfg.PollInterval, max(r.s.cfg.Lease/4, 10*time.Millisecond))); err != nil {
		return false, err
	}
	return false, nil
}

// left counts the items the feed has yet to see settled (inFlight: being
// replayed now; not known for retries): every unsettled item, or those
// that wait to be sent again.
func (f *feeder) left(ctx context.Context) (left, inFlight int64, err error) {
	if !f.retries {
		return f.r.s.st.ReplayItemsLeft(ctx, f.r.task.ID)
	}
	a, err := f.r.s.st.ReplayAttempts(ctx, f.r.task.ID)
	return a.Waiting, 0, err
}

// claim claims the given items and hands the batch to the publisher loop.
// It retries a failed claim until it succeeds or the run stops, and
// returns how many messages it claimed and how many items it settled
// (skipped; unknown, having waited to be sent again when their message
// was no longer pending; or returned from the dead after an unknown
// outcome).
func (r *taskRun) claim(ctx context.Context, ids []int64, out chan<- *claimBatch) (claimed, skipped int) {
	backoff := 100 * time.Millisecond
	for {
		token := r.s.newOwner()
		start := time.Now()
		// The claim runs to its end even when the run is stopping: a claim
		// committed but abandoned would be taken back later as if it might
		// have been published.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		res, err := r.s.st.ClaimReplayBatch(cctx, store.ReplayClaim{
			TaskID: r.task.ID, Token: token, Lease: r.s.cfg.Lease, IDs: ids,
			MaxReplays: r.s.cfg.MaxReplays, Force: r.task.Force, MarkFirst: markFirst, Canary: r.canary.Load(),
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return 0, 0
			}
			r.log.Warn("cannot claim messages; retrying", "error", err, "retry_in", backoff)
			if sleep(ctx, backoff) != nil {
				return 0, 0
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		r.countNotSent(int64(res.Skipped), int64(res.Unknown))
		if res.Returned > 0 {
			// Delivered before its outcome was known: a copy died and came
			// back (store.ClaimResult.Returned).
			r.s.metrics.replays.WithLabelValues(resultPublished).Add(float64(res.Returned))
			r.log.Info("messages whose outcome was unknown came back dead before they were sent again; not sending them again",
				"messages", res.Returned)
		}
		if len(res.Messages) == 0 {
			return 0, res.Skipped + res.Unknown + res.Returned
		}
		b := &claimBatch{token: token, msgs: res.Messages, deadline: start.Add(r.fenceLease()), open: len(res.Messages),
			marked: min(markFirst, len(res.Messages)) - 1}
		r.mu.Lock()
		r.batches[token] = b
		r.unsettled += len(res.Messages)
		r.mu.Unlock()
		select {
		case out <- b:
		case <-ctx.Done():
			r.release(b, b.msgs)
		}
		return len(res.Messages), res.Skipped + res.Unknown + res.Returned
	}
}

// countNotSent counts the items settled without a publish: skipped, and
// unknown (they waited to be sent again after an unknown outcome, and
// their message was no longer one to send: the copy sent first may have
// been delivered).
func (r *taskRun) countNotSent(skipped, unknown int64) {
	if skipped > 0 {
		r.s.metrics.replays.WithLabelValues(resultSkipped).Add(float64(skipped))
	}
	if unknown > 0 {
		r.s.metrics.replays.WithLabelValues(resultUnknown).Add(float64(unknown))
		r.log.Info("messages that waited to be sent again were no longer pending; settled as unknown (the copy sent first may have been delivered)",
			"messages", unknown)
	}
}
