package cron

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/dlq/dlq/store"
)

// A job's ticks go through two loops on each instance: the claim loop
// claims them in the database as the cron library fires them, and the run
// loop runs the claimed ones, one at a time (see the package
// documentation, "A run still going at the next tick").

// claimLoop claims j's ticks, one after the other in tick order, as the cron
// loop delivers them, and hands the claimed ones to the run loop. Every
// instance tries every tick; only the holder of the lease gets it (see
// store.BeginJobRun). Claims are never held up by a run in progress: a tick
// claimed meanwhile waits in the queue (see queueTick).
func (s *Scheduler) claimLoop(j *scheduledJob) {
	for {
		var tick time.Time
		select {
		case tick = <-j.fired:
		case <-s.ctx.Done():
			return
		}
		s.claim(j, tick)
	}
}

func (s *Scheduler) claim(j *scheduledJob, tick time.Time) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("job claim panicked", "job", j.Name, "tick", tick, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	// A claim in flight is not cancelled by Stop: cancelling it could
	// leave a tick claimed in the database but unknown here, marked running
	// for good. A tick claimed as the instance stops is recorded as skipped.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 10*time.Second)
	begin := s.cfg.Store.BeginJobRun
	if !j.claimedOnce {
		// The first claim of this process takes the lease under a new
		// token even if it is this instance's and live: an earlier process
		// of the same name (a restart with the same DLQ_INSTANCE) left its
		// run marked running, and is fenced out and its run closed.
		begin = s.cfg.Store.BeginFirstJobRun
	}
	start, ok, err := begin(bctx, j.Name, s.cfg.Instance, tick, j.ttl)
	cancel()
	if err != nil {
		s.log.Warn("cannot start job run", "job", j.Name, "tick", tick, "error", err)
		return
	}
	if !ok {
		return
	}
	j.claimedOnce = true
	run := &Run{
		ID: start.RunID, Job: j.Name, Tick: tick, Lease: start.Lease,
		Logger: s.log.With("job", j.Name, "tick", tick, "run_id", start.RunID, "token", start.Lease.Token),
	}
	if s.ctx.Err() != nil {
		s.skip(j, run, "the instance stopped before the run began")
		return
	}
	s.queueTick(j, run)
}

// queueTick hands a claimed tick to the run loop. A tick claimed while a run
// is in progress waits for it; only the newest waiting tick is kept: when a
// later tick is claimed while the run still goes on, the waiting ones are
// skipped, each recorded with the run that was still going. So a run that
// overruns its interval delays the next tick instead of losing it, and one
// that goes on past a further tick skips the ticks in between. (When no run
// is in progress the run loop simply has not taken the queue yet, and every
// queued tick runs, in order.)
func (s *Scheduler) queueTick(j *scheduledJob, run *Run) {
	j.mu.Lock()
	var skipped []*claimedTick
	var cur *Run
	if j.running != nil {
		cur = j.running.run
		skipped, j.queue = j.queue, nil
	}
	j.queue = append(j.queue, &claimedTick{run: run, waited: cur != nil})
	j.mu.Unlock()
	select {
	case j.ready <- struct{}{}:
	default:
	}
	for _, c := range skipped {
		s.skip(j, c.run, fmt.Sprintf("run %d (tick %s) was still running on %s when tick %s came",
			cur.ID, cur.Tick.Format(time.RFC3339Nano), s.cfg.Instance, run.Tick.Format(time.RFC3339Nano)))
	}
}

// runLoop runs j's claimed ticks one at a time, in the order they were
// claimed. When the scheduler stops, it waits for the claim loop to end
// (claimed closes) and records what is still queued as skipped.
func (s *Scheduler) runLoop(j *scheduledJob, claimed <-chan struct{}) {
	for {
		select {
		case <-j.ready:
		case <-s.ctx.Done():
			<-claimed
			j.mu.Lock()
			left := j.queue
			j.queue = nil
			j.mu.Unlock()
			for _, c := range left {
				s.skip(j, c.run, "the instance stopped before the run began")
			}
			return
		}
		for {
			j.mu.Lock()
			if len(j.queue) == 0 {
				j.mu.Unlock()
				break
			}
			next := j.queue[0]
			j.queue = j.queue[1:]
			j.running = next
			j.mu.Unlock()
			if s.ctx.Err() != nil {
				s.skip(j, next.run, "the instance stopped before the run began")
			} else {
				if next.waited {
					// Its started_at said when it was claimed; it starts now.
					fctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
					if err := s.cfg.Store.StartJobRun(fctx, next.run.ID); err != nil {
						next.run.Logger.Warn("cannot record start of job run", "error", err)
					}
					cancel()
				}
				s.runClaimed(j, next.run)
			}
			j.mu.Lock()
			j.running = nil
			j.mu.Unlock()
		}
	}
}

// skip records a claimed tick that did not run, and why.
func (s *Scheduler) skip(j *scheduledJob, run *Run, reason string) {
	s.metrics.runs.WithLabelValues(j.Name, store.JobSkipped).Inc()
	run.Logger.Warn("job tick skipped", "reason", reason)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
	defer cancel()
	if err := s.cfg.Store.FinishJobRun(fctx, run.ID, store.JobSkipped, 0, errors.New("skipped: "+reason)); err != nil {
		run.Logger.Warn("cannot record skipped tick", "error", err)
	}
}

// runClaimed runs a claimed tick under its lease and records how it ended.
func (s *Scheduler) runClaimed(j *scheduledJob, run *Run) {
	ctx := s.ctx
	// Start with a full lease: the claim may have found it near its expiry
	// (and, for a tick that waited, the previous run renewed it last), and
	// the heartbeat's first renewal is TTL/3 away. A lease already lost
	// means another instance may be running the job: do not start.
	rctx, rcancel := context.WithTimeout(ctx, j.ttl)
	err := s.cfg.Store.RenewLease(rctx, run.Lease, j.ttl)
	rcancel()
	if errors.Is(err, store.ErrLeaseLost) {
		s.metrics.observe(j.Name, store.JobLeaseLost, 0)
		run.Logger.Warn("job run not started: another instance holds the job now", "error", err)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.cfg.Store.FinishJobRun(fctx, run.ID, store.JobLeaseLost, 0, err); err != nil {
			run.Logger.Warn("cannot record end of job run", "outcome", store.JobLeaseLost, "error", err)
		}
		return
	}
	if err != nil && ctx.Err() == nil {
		run.Logger.Warn("cannot renew job lease", "error", err) // the fence decides
	}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	runCtx, cancelTimeout := context.WithTimeoutCause(runCtx, j.Timeout, fmt.Errorf("job %s ran longer than its timeout %s", j.Name, j.Timeout))
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		s.heartbeat(runCtx, run, j.ttl, cancelRun)
	}()

	began := time.Now()
	rows, runErr := s.call(runCtx, j, run)
	elapsed := time.Since(began)
	lost := errors.Is(context.Cause(runCtx), store.ErrLeaseLost)
	cancelTimeout()
	cancelRun(nil)
	<-hbDone

	outcome := store.JobSuccess
	switch {
	case runErr == nil:
	case lost || errors.Is(runErr, store.ErrLeaseLost):
		outcome = store.JobLeaseLost
		runErr = errors.Join(runErr, context.Cause(runCtx))
	default:
		outcome = store.JobFailure
	}
	s.metrics.observe(j.Name, outcome, elapsed)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.cfg.Store.FinishJobRun(fctx, run.ID, outcome, rows, runErr); err != nil {
		run.Logger.Warn("cannot record end of job run", "outcome", outcome, "error", err)
	}
	switch {
	case outcome == store.JobSuccess:
		run.Logger.Debug("job run finished", "rows", rows, "duration", elapsed)
	case outcome == store.JobLeaseLost:
		run.Logger.Warn("job run stopped: another instance holds the job now", "rows", rows, "duration", elapsed, "error", runErr)
	case ctx.Err() != nil && errors.Is(runErr, context.Canceled):
		run.Logger.Info("job run cancelled by shutdown", "rows", rows, "duration", elapsed)
	default:
		run.Logger.Error("job run failed", "rows", rows, "duration", elapsed, "error", runErr)
	}
}

// call runs the job, turning a panic into an error so the run is recorded
// as failed and the process carries on.
func (s *Scheduler) call(ctx context.Context, j *scheduledJob, run *Run) (rows int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("job %s panicked: %v\n%s", j.Name, r, debug.Stack())
		}
	}()
	return j.Run(ctx, run)
}

// heartbeat renews the lease every ttl/3 while the run lasts. When the
// lease turns out to be lost it cancels the run: nothing it writes could
// commit anyway, and the new holder should have the database to itself.
func (s *Scheduler) heartbeat(ctx context.Context, run *Run, ttl time.Duration, cancel context.CancelCauseFunc) {
	t := time.NewTicker(max(ttl/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, ttl)
		err := s.cfg.Store.RenewLease(rctx, run.Lease, ttl)
		rcancel()
		switch {
		case err == nil:
		case errors.Is(err, store.ErrLeaseLost):
			cancel(err)
			return
		case ctx.Err() == nil:
			// The database may be briefly unreachable; the fence decides
			// whether the run's writes still count.
			run.Logger.Warn("cannot renew job lease", "error", err)
		}
	}
}
