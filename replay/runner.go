package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
)

// taskRun executes one task on this instance, from the moment its lease
// is acquired to the moment it is finished or handed back.
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

type exchangeCheck struct {
	exists bool
	at     time.Time
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
	s.mu.Lock()
	s.running[r.task.ID] = r
	s.mu.Unlock()
	s.metrics.running.Inc()
	defer func() {
		s.mu.Lock()
		delete(s.running, r.task.ID)
		s.mu.Unlock()
		s.metrics.running.Dec()
		r.retireProgress(context.WithoutCancel(parent))
		s.poke() // a slot is free
	}()

	pub, err := broker.NewPublisher(broker.PublisherConfig{Conn: s.cfg.Conn, Window: s.cfg.Window,
		ConfirmTimeout: s.cfg.ConfirmTimeout, Logger: r.log})
	if err != nil {
		r.log.Error("cannot create publisher", "error", err)
		return
	}
	r.pub = pub
	r.log.Info("replay task running", "status", r.task.Status, "requested", r.task.Requested,
		"remaining", r.task.Remaining(), "rate_per_second", r.task.RatePerSecond)

	// The heartbeat and the settler outlive the publishing: claims must stay
	// renewed, and outcomes recorded, until the last confirm is in.
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

	workErr := r.work(ctx)

	// Drain: confirms in flight end (acked, or unknown at the timeout), and
	// every outcome is recorded before the claims' renewals stop.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(parent), s.cfg.ShutdownTimeout)
	defer dcancel()
	if err := pub.Close(dctx); err != nil {
		r.log.Warn("confirms still missing after the shutdown timeout; those messages end as unknown", "error", err)
	}
	if err := r.waitSettled(dctx); err != nil {
		r.log.Error("could not record every outcome; the claims left will be taken back after the lease as unknown", "error", err)
	}
	bgCancel()
	bg.Wait()
	r.dropMarks(context.WithoutCancel(parent))

	final := context.WithoutCancel(parent)
	switch {
	case workErr == nil:
		t, err := s.st.UpdateReplayTask(final, r.task.ID, r.owner, []string{store.TaskRunning},
			store.ReplayTaskUpdate{Status: store.TaskCompleted, Finish: true})
		if err != nil {
			r.log.Warn("task finished but its status could not be set; another runner will find nothing left", "error", err)
			_ = s.st.ReleaseReplayTask(final, r.task.ID, r.owner)
			return
		}
		r.log.Info("replay task completed", "published", t.Published, "failed", t.Failed, "skipped", t.Skipped, "unknown", t.Unknown)
	case errors.Is(workErr, errCancelled):
		r.log.Info("replay task stopped: cancelled")
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

// publishPhase claims and publishes until limit messages were claimed
// (limit < 0: until every item of the task is settled), and returns once
// all it claimed is settled. It returns how many it claimed.
func (r *taskRun) publishPhase(ctx context.Context, limit int64) (int64, error) {
	batches := make(chan *claimBatch)
	var claimed int64
	feedErr := make(chan error, 1)
	go func() {
		defer close(batches)
		var err error
		claimed, err = r.feed(ctx, limit, batches)
		feedErr <- err
	}()
	// The next batch is taken, and its second stretch marked, while the
	// current one ends: otherwise every batch would start by waiting for
	// a mark, since the claim marks only its first markFirst messages.
	var (
		next      *claimBatch
		nextAhead *markAhead
		open      = true
	)
	takeNext := func() {
		if next != nil || !open {
			return
		}
		select {
		case nb, ok := <-batches:
			if !ok {
				open = false
				return
			}
			next, nextAhead = nb, newMarkAhead(r, nb)
			nextAhead.prefetch()
		default: // not claimed yet
		}
	}
	for {
		b, ahead := next, nextAhead
		next, nextAhead = nil, nil
		if b == nil {
			if !open {
				break
			}
			var ok bool
			if b, ok = <-batches; !ok {
				break
			}
			ahead = newMarkAhead(r, b)
		}
		r.publishBatch(ctx, b, ahead, takeNext)
	}
	err := <-feedErr
	if err != nil {
		return claimed, err
	}
	return claimed, r.waitSettled(ctx)
}

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
// flight, and stops once no item is left unsettled.
//
// An unthrottled task claims three batches at once: a claim costs about
// as long as publishing a batch, and on a busy database claims vary so
// much that with two the publisher still waited for one (a quarter of a
// run, measured). Throttled tasks and canaries claim one at a time, which
// keeps their counts exact.
func (r *taskRun) feed(ctx context.Context, limit int64, out chan<- *claimBatch) (int64, error) {
	parallel := 1
	if limit < 0 && r.limiter == nil {
		parallel = claimers
	}
	var (
		cursor   int64
		backoff  = 100 * time.Millisecond
		sem      = make(chan struct{}, parallel)
		wg       sync.WaitGroup
		mu       sync.Mutex // guards progress and total
		progress bool
		total    int64
	)
	// done waits for the claims under way and returns what was claimed.
	done := func(err error) (int64, error) {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return total, err
	}
	for {
		if err := context.Cause(ctx); err != nil {
			return done(err)
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return done(context.Cause(ctx))
		}
		n := r.claimSize()
		if limit >= 0 {
			// One claimer: the previous claim is done, total is exact.
			mu.Lock()
			left := limit - total
			mu.Unlock()
			if left <= 0 {
				<-sem
				return done(nil)
			}
			n = min(n, int(left))
		}
		ids, more, err := r.s.st.ReplayItemsAfter(ctx, r.task.ID, cursor, n, r.s.cfg.BatchBytes)
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return done(context.Cause(ctx))
			}
			r.log.Warn("cannot read the task's next messages; retrying", "error", err, "retry_in", backoff)
			if err := sleep(ctx, backoff); err != nil {
				return done(err)
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if len(ids) > 0 {
			cursor = ids[len(ids)-1]
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				claimed, skipped := r.claim(ctx, ids, out)
				mu.Lock()
				total += int64(claimed)
				progress = progress || claimed+skipped > 0
				mu.Unlock()
			}()
		} else {
			<-sem
		}
		if more {
			continue
		}
		// End of a pass: let the claims under way finish first.
		wg.Wait()
		mu.Lock()
		moved := progress
		progress = false
		mu.Unlock()
		cursor = 0
		if moved {
			continue
		}
		if err := r.waitSettled(ctx); err != nil {
			return done(err)
		}
		if _, err := r.s.st.SkipDeletedReplayItems(ctx, r.task.ID); err != nil {
			r.log.Warn("cannot settle items of deleted messages", "error", err)
		}
		left, inFlight, err := r.s.st.ReplayItemsLeft(ctx, r.task.ID)
		if err != nil {
			r.log.Warn("cannot count what is left", "error", err)
		} else if left == 0 {
			return done(nil)
		} else {
			r.log.Debug("items held by other claims; waiting for them", "left", left, "in_flight", inFlight)
		}
		if err := sleep(ctx, min(r.s.cfg.PollInterval, max(r.s.cfg.Lease/4, 10*time.Millisecond))); err != nil {
			return done(err)
		}
	}
}

// claim claims the given items and hands the batch to the publisher loop.
// It retries a failed claim until it succeeds or the run stops, and
// returns how many messages it claimed and how many items it settled as
// skipped.
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
			MaxReplays: r.s.cfg.MaxReplays, Force: r.task.Force, MarkFirst: markFirst,
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
		if res.Skipped > 0 {
			r.s.metrics.replays.WithLabelValues(resultSkipped).Add(float64(res.Skipped))
		}
		if len(res.Messages) == 0 {
			return 0, res.Skipped
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
		return len(res.Messages), res.Skipped
	}
}

// stillHeld reports whether the batch's claim may still be published
// from. Within its deadline it is. Past it (the heartbeat is late: a slow
// database, a stalled process), the claim is looked at again: renewed if
// its lease has not run out in the database, lost otherwise — it may have
// been taken back and handed to another runner, whose copy of these rows
// must be the only one published.
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
	r.mu.Lock()
	b.deadline = start.Add(r.fenceLease())
	r.mu.Unlock()
	return true
}

// fenceLease is how long after a claim (or renewal) statement started its
// holder keeps publishing: the lease minus a quarter, so a publish under
// way when the time runs out still lands before anyone can take the claim
// back.
func (r *taskRun) fenceLease() time.Duration {
	return r.s.cfg.Lease - r.s.cfg.Lease/4
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

// publishBatch publishes a claimed batch, one message at a time, checking
// before each publish that the run may go on (cancel reaches here within
// one publish), that the rate allows it and that the claim is still
// trusted. What it does not publish it hands back. nearEnd is called once,
// when markStep/2 messages are left to publish.
func (r *taskRun) publishBatch(ctx context.Context, b *claimBatch, ahead *markAhead, nearEnd func()) {
	defer ahead.wait()
	for i := range b.msgs {
		if len(b.msgs)-i == markStep/2 || (i == 0 && len(b.msgs) < markStep/2) {
			nearEnd()
		}
		m := &b.msgs[i]
		if ctx.Err() != nil {
			r.release(b, b.msgs[i:])
			return
		}
		if err := ahead.ensure(ctx, i); err != nil {
			r.log.Warn("cannot record what is about to be published; handing the rest of the batch back", "error", err)
			r.release(b, b.msgs[i:])
			return
		}
		if r.limiter != nil {
			if err := r.limiter.Wait(ctx); err != nil {
				r.release(b, b.msgs[i:])
				return
			}
		}
		if !r.stillHeld(ctx, b) {
			r.log.Warn("claim lost (its lease ran out before it was renewed); handing the rest of the batch back", "messages", len(b.msgs)-i)
			r.release(b, b.msgs[i:])
			return
		}
		exchange, key := target(r.task, *m)
		if ok, why := r.exchangeOK(ctx, exchange); !ok {
			r.record(b, store.ReplayOutcome{ID: m.ID, Token: b.token, Result: store.OutcomeFailed, Error: why}, resultFailed)
			continue
		}
		rid := newReplayID()
		msg, err := buildPublishing(*m, rid, r.s.cfg.KeepUserID)
		if err != nil {
			r.record(b, store.ReplayOutcome{ID: m.ID, Token: b.token, Result: store.OutcomeFailed, Error: err.Error()}, resultFailed)
			continue
		}
		if err := r.waitBacklog(ctx); err != nil {
			r.release(b, b.msgs[i:])
			return
		}
		id := m.ID
		err = r.pub.Publish(ctx, exchange, key, msg, func(res broker.Result) { r.onResult(b, id, rid, res) })
		if err != nil {
			if ctx.Err() != nil {
				r.release(b, b.msgs[i:])
				return
			}
			r.record(b, store.ReplayOutcome{ID: m.ID, Token: b.token, Result: store.OutcomeFailed, Error: err.Error()}, resultFailed)
			continue
		}
		r.s.metrics.inFlight.Inc()
		// The body is no longer needed here; let it go.
		m.Body, m.Headers, m.Properties = nil, nil, nil
	}
}

// markAhead keeps a claim's write-ahead mark (store.MarkReplayClaim)
// ahead of publishing: a message is published only once the mark covers
// it, and the next stretch is marked in the background while the current
// one goes out, so publishing rarely waits for it. If the process dies,
// only the marked stretch can be in doubt; the rest of the claim goes back
// to the task untouched.
type markAhead struct {
	r       *taskRun
	b       *claimBatch
	through int // index of the last message covered
	pending chan markResult
}

func newMarkAhead(r *taskRun, b *claimBatch) *markAhead {
	return &markAhead{r: r, b: b, through: b.marked}
}

// prefetch marks the stretch after the one the claim marked, before the
// batch's turn comes.
func (m *markAhead) prefetch() {
	if m.pending == nil && m.through < len(m.b.msgs)-1 {
		m.start(m.through + 1)
	}
}

type markResult struct {
	through int
	err     error
}

// markStep is how many messages one mark covers; markFirst how many the
// claim itself marks, so that publishing a batch can start at once while a
// claimed batch that waits its turn has only a few messages in doubt.
//
// A mark is a small transaction, but its commit waits for the WAL that the
// claims and settlements in flight wrote before it (a megabyte each): 8 ms
// on average on a busy machine, while the publisher, which goes in bursts
// as confirms free its window, sends 64 messages in a few. With stretches
// of 128 the publisher waited for marks during a quarter of a run
// (measured); a stretch now covers a whole default batch, marked while the
// previous batch's last markStep/2 messages go out.
const (
	markStep  = 512
	markFirst = 32
)

func (m *markAhead) ensure(ctx context.Context, i int) error {
	for i > m.through {
		if m.pending == nil {
			m.start(i)
		}
		select {
		case res := <-m.pending:
			m.pending = nil
			if res.err != nil {
				return res.err
			}
			m.through = max(m.through, res.through)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	// Mark the next stretch while half a stretch is still ahead: a mark can
	// take a while when the database is busy, and publishing should not
	// wait for it.
	if m.pending == nil && m.through < len(m.b.msgs)-1 && m.through-i < markStep/2 {
		m.start(m.through + 1)
	}
	return nil
}

// start marks the stretch beginning at index from.
func (m *markAhead) start(from int) {
	through := min(from+markStep-1, len(m.b.msgs)-1)
	ch := make(chan markResult, 1)
	m.pending = ch
	r, token, id := m.r, m.b.token, m.b.msgs[through].ID
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 30*time.Second)
		defer cancel()
		ch <- markResult{through: through, err: r.s.st.MarkReplayClaim(ctx, r.task.ID, token, id)}
	}()
}

// wait lets a mark in flight finish.
func (m *markAhead) wait() {
	if m.pending != nil {
		<-m.pending
	}
}

// exchangeOK looks up a target exchange before publishing to it: a
// publish to a missing exchange closes the channel, which would end every
// other publish in flight on it as unknown.
func (r *taskRun) exchangeOK(ctx context.Context, name string) (bool, string) {
	if name == "" {
		return true, ""
	}
	now := time.Now()
	if c, ok := r.exchanges[name]; ok {
		if c.exists && now.Sub(c.at) < 30*time.Second {
			return true, ""
		}
		if !c.exists && now.Sub(c.at) < time.Second {
			return false, fmt.Sprintf("exchange %q does not exist", name)
		}
	}
	exists, err := broker.ExchangeExists(ctx, r.s.cfg.Conn, name)
	if err != nil {
		// Not known: publish, and let the confirm tell.
		return true, ""
	}
	r.exchanges[name] = exchangeCheck{exists: exists, at: now}
	if !exists {
		return false, fmt.Sprintf("exchange %q does not exist", name)
	}
	return true, ""
}

// onResult is called by the publisher with a publish's outcome. It must
// not block: it only queues the outcome for the settler.
func (r *taskRun) onResult(b *claimBatch, id int64, replayID string, res broker.Result) {
	r.s.metrics.inFlight.Dec()
	o := store.ReplayOutcome{ID: id, Token: b.token}
	var label string
	switch res.Outcome {
	case broker.Acked:
		o.Result, label = store.OutcomePublished, resultPublished
		if r.canary.Load() {
			// The canary knows its own publishes by their replay id when
			// they die again.
			o.ReplayID = replayID
		}
	case broker.Returned:
		o.Result, o.Error, label = store.OutcomeFailed, res.Reason, resultUnroutable
	case broker.Nacked:
		o.Result, o.Error, label = store.OutcomeFailed, res.Reason, resultNacked
	case broker.Unknown:
		o.Result, o.Error, label = store.OutcomeUnknown, res.Reason, resultUnknown
	default:
		o.Result, o.Error, label = store.OutcomeFailed, res.Reason, resultFailed
	}
	r.record(b, o, label)
}

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

// claimers is how many claims an unthrottled run has going at once, and
// settlers how many settlement transactions every run has going at once.
const (
	claimers = 3
	settlers = 3
)

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
			if missed := res.Published + res.Failed + res.Unknown + res.Released - res.Marked; missed > 0 {
				r.log.Debug("some rows had changed before their outcome was recorded (died again first, or claim taken back)", "rows", missed)
			}
			finished = nil
			break
		}
		if ctx.Err() != nil {
			r.log.Error("giving up recording outcomes; the claims will be taken back after their lease as unknown",
				"messages", len(outs), "error", err)
			break
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
