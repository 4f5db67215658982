package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// Why a task run stopped before finishing its work.
var (
	errCancelled    = errors.New("replay task cancelled")
	errLeaseLost    = errors.New("replay task taken over by another runner")
	errCanaryFailed = errors.New("canary failed")
	errShutdown     = errors.New("dlq is shutting down")
	errConnClosed   = errors.New("the replay's broker connection is closed")
)

// taskRun executes one task on this instance, from the moment its lease
// is acquired to the moment it is finished or handed back. This file holds
// its lifecycle (run); its parts each have a file: canary.go (the phases),
// claim.go (taking batches of the task's items), publish.go (publishing
// them), mark.go (the write-ahead mark ahead of publishing), settle.go
// (recording outcomes) and lease.go (keeping the task's and the claims'
// leases, and the progress gauges).
type taskRun struct {
	s       *Service
	log     *slog.Logger
	task    store.ReplayTask
	owner   string
	pub     *broker.Publisher
	limiter *rate.Limiter // nil: unthrottled

	ctx  context.Context // ends when the run must stop publishing
	stop func(cause error)

	canary atomic.Bool // outcomes being settled belong to the canary

	mu       sync.Mutex
	changed  *sync.Cond
	batches  map[string]*claimBatch // live claim tokens
	outcomes []store.ReplayOutcome  // awaiting settlement
	// doneTokens are claims whose outcomes are all recorded; their marks
	// are dropped by the next settlement.
	doneTokens []string
	unsettled  int // claimed messages not settled yet
	kick       chan struct{}

	exchanges map[string]exchangeCheck // used by the publishing goroutine only
}

func (s *Service) newRun(t store.ReplayTask) *taskRun {
	r := &taskRun{
		s:         s,
		log:       s.log.With("task_id", t.ID),
		task:      t,
		owner:     t.RunnerOwner,
		batches:   map[string]*claimBatch{},
		kick:      make(chan struct{}, 1),
		exchanges: map[string]exchangeCheck{},
	}
	r.changed = sync.NewCond(&r.mu)
	if t.RatePerSecond > 0 {
		r.limiter = newPacer(t.RatePerSecond)
	}
	return r
}

// newPacer returns the token bucket of a throttled task: n messages at
// rate r take (n-1)/r seconds, evenly spaced. It starts with one token, so
// the first message goes at once and the rest one by one; its burst holds
// a tenth of a second of messages, so that the publisher catches up when
// it fell behind (a timer that fired late, a stall for a database write).
// With a burst of 1 every late wake-up was lost for good: on a loaded
// machine 500 messages at 100/s took 5.7 s instead of 5.
func newPacer(perSecond float64) *rate.Limiter {
	burst := max(1, int(perSecond/10))
	l := rate.NewLimiter(rate.Limit(perSecond), burst)
	l.ReserveN(time.Now(), burst-1)
	return l
}

func (r *taskRun) run(parent context.Context) {
	s := r.s
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	r.ctx = ctx
	r.stop = func(cause error) { cancel(cause) }
	r.register()
	defer r.unregister(parent)

	pub, err := broker.NewPublisher(broker.PublisherConfig{Conn: s.cfg.Conn, Window: s.cfg.Window,
		ConfirmTimeout: s.cfg.ConfirmTimeout, Logger: r.log})
	if err != nil {
		r.log.Error("cannot create publisher", "error", err)
		return
	}
	r.pub = pub
	r.log.Info("replay task running", "status", r.task.Status, "requested", r.task.Requested,
		"remaining", r.task.Remaining(), "rate_per_second", r.task.RatePerSecond)

	stopBackground := r.startBackground(parent)

	workErr := r.work(ctx)

	dctx, dcancel := context.WithTimeout(context.WithoutCancel(parent), s.cfg.ShutdownTimeout)
	defer dcancel()
	r.drain(dctx, pub, stopBackground)
	r.dropMarks(context.WithoutCancel(parent))

	r.finish(context.WithoutCancel(parent), parent, workErr)
}

// register lists the run among the service's running tasks.
func (r *taskRun) register() {
	s := r.s
	s.mu.Lock()
	s.running[r.task.ID] = r
	s.mu.Unlock()
	s.metrics.running.Inc()
}

// unregister undoes register once the run is over, and frees its slot.
func (r *taskRun) unregister(parent context.Context) {
	s := r.s
	s.mu.Lock()
	delete(s.running, r.task.ID)
	s.mu.Unlock()
	s.metrics.running.Dec()
	r.retireProgress(context.WithoutCancel(parent))
	s.poke() // a slot is free
}

// startBackground starts the heartbeat and the settlers, and returns the
// function that stops them and waits for them to end.
//
// The heartbeat and the settler outlive the publishing: claims must stay
// renewed, and outcomes recorded, until the last confirm is in.
func (r *taskRun) startBackground(parent context.Context) (stop func()) {
	bgCtx, bgCancel := context.WithCancel(context.WithoutCancel(parent))
	var bg sync.WaitGroup
	// Several settlers: a settlement costs about as much database time as
	// a claim, and one at a time could not keep up with the publisher. They
	// update different rows, and the shared counter rows last, in order.
	bg.Add(1 + settlers)
	go func() { defer bg.Done(); r.heartbeat(bgCtx) }()
	for range settlers {
		go func() { defer bg.Done(); r.settler(bgCtx) }()
	}
	return func() {
		bgCancel()
		bg.Wait()
	}
}

// drain lets the confirms in flight end (acked, or unknown at the
// timeout), and records every outcome before the claims' renewals stop
// (stopBackground).
func (r *taskRun) drain(dctx context.Context, pub *broker.Publisher, stopBackground func()) {
	if err := pub.Close(dctx); err != nil {
		r.log.Warn("confirms still missing after the shutdown timeout; those messages end as unknown", "error", err)
	}
	if err := r.waitSettled(dctx); err != nil {
		r.log.Error("could not record every outcome; the claims left will be taken back after the lease as unknown", "error", err)
	}
	stopBackground()
}

// finish records how the run ended (workErr) once every outcome is in:
// the task completed, let go, or handed back to be resumed.
func (r *taskRun) finish(final, parent context.Context, workErr error) {
	s := r.s
	if workErr != nil && r.stoppedForGood(final, workErr) {
		// Every outcome is in: what waited to be sent again never will be.
		s.settleStoppedRetries(final, r.task.ID)
	}
	switch {
	case workErr == nil:
		t, err := s.st.UpdateReplayTask(final, r.task.ID, r.owner, []string{store.TaskRunning},
			store.ReplayTaskUpdate{Status: store.TaskCompleted, Finish: true})
		if err != nil {
			r.log.Warn("task finished but its status could not be set; another runner will find nothing left", "error", err)
			_ = s.st.ReleaseReplayTask(final, r.task.ID, r.owner)
			return
		}
		r.log.Info("replay task completed", "published", t.Published, "failed", t.Failed, "skipped", t.Skipped, "unknown", t.Unknown,
			"republished", t.Republished)
	case errors.Is(workErr, errCancelled):
		r.log.Info("replay task stopped: cancelled")
		// Every outcome is in: let the task go, so that what reads its
		// runner knows at once that nothing of it is under way any more
		// (an edit whose cancelled task sent nothing may be redone,
		// store.GetMessageEdit). No runner takes a cancelled task again.
		if err := s.st.ReleaseReplayTask(final, r.task.ID, r.owner); err != nil {
			r.log.Warn("cannot let the cancelled task go; its lease runs out instead", "error", err)
		}
	case errors.Is(workErr, errLeaseLost):
		r.log.Warn("replay task lease lost; another runner holds it now")
	case errors.Is(workErr, errCanaryFailed):
		r.log.Warn("replay task stopped: canary failed", "error", workErr)
	default:
		if parent.Err() == nil {
			r.log.Error("replay task interrupted; handing it back to be resumed", "error", workErr)
		} else {
			r.log.Info("replay task handed back for another runner to resume", "reason", errShutdown)
		}
		if err := s.st.ReleaseReplayTask(final, r.task.ID, r.owner); err != nil {
			r.log.Warn("cannot hand the task back; it will be resumed after its lease", "error", err)
		}
	}
}

// stoppedForGood reports whether the task this run stopped (workErr) has
// finished: no runner takes it again. A cancel or a failed canary says so;
// so does the task's status when the run stopped for another reason first
// (a shutdown, a lost lease) and the cancel came while it drained: its
// publishes then ending unknown were to be sent again (sendAgain sees only
// the run's first cause), and nobody else would settle them. A task
// handed back to be resumed is not finished.
func (r *taskRun) stoppedForGood(ctx context.Context, workErr error) bool {
	if errors.Is(workErr, errCancelled) || errors.Is(workErr, errCanaryFailed) {
		return true
	}
	t, err := r.s.st.GetReplayTask(ctx, r.task.ID)
	return err == nil && store.TaskFinished(t.Status)
}

func (r *taskRun) update(u store.ReplayTaskUpdate, from ...string) (store.ReplayTask, error) {
	t, err := r.s.st.UpdateReplayTask(context.WithoutCancel(r.ctx), r.task.ID, r.owner, from, u)
	if errors.Is(err, store.ErrReplayLeaseLost) {
		if cause := context.Cause(r.ctx); cause != nil {
			return t, cause
		}
		return t, fmt.Errorf("%w: %w", errLeaseLost, err)
	}
	return t, err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
