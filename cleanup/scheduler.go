package cleanup

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/dlq/dlq/store"
)

// JobFunc is the body of a job. It runs on one instance per tick, under
// run.Lease: every write it makes must pass the lease to the store, which
// refuses it (store.ErrLeaseLost) once another instance has taken the job.
// ctx ends when the lease is lost, the job's timeout passes or the scheduler
// stops. rows is what the run changed, recorded with it.
type JobFunc func(ctx context.Context, run *Run) (rows int64, err error)

// Job is one scheduled job.
type Job struct {
	// Name identifies the job: its lease, its runs and its metric label.
	// Required.
	Name string
	// Schedule is when it runs (see ParseSchedule). Required.
	Schedule string
	// Run is the job. Required.
	Run JobFunc
	// Timeout bounds one run. Optional, default JobTimeoutDefault.
	Timeout time.Duration
}

// Run describes the run in progress.
type Run struct {
	ID    int64
	Job   string
	Tick  time.Time
	Lease store.Lease
	// Logger carries job, tick and run_id.
	Logger *slog.Logger
}

// Defaults of SchedulerConfig and Job.
const (
	LeaseTTLMaxDefault = 30 * time.Second
	JobTimeoutDefault  = 15 * time.Minute
)

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	// Store holds leases and runs. Required.
	Store *store.Store
	// Jobs to schedule. Optional (a scheduler without jobs idles).
	Jobs []Job
	// Instance names this process in leases and runs. Optional, default
	// host-pid-random: unique per process, so a restarted process is a new
	// holder.
	Instance string
	// LeaseTTL is how long a lease outlives its holder's last renewal.
	// Optional, default the job's interval, at most LeaseTTLMaxDefault: a job
	// whose holder died runs on another instance at the first tick after
	// the lease expired, so at most one tick later.
	LeaseTTL time.Duration
	// Logger is optional, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the dlq_job_* metrics. Optional.
	Registerer prometheus.Registerer
}

func (c *SchedulerConfig) validate() error {
	if c.Store == nil {
		return errors.New("cleanup: SchedulerConfig.Store is required")
	}
	if c.LeaseTTL < 0 {
		return fmt.Errorf("cleanup: SchedulerConfig.LeaseTTL must be >= 0, got %s", c.LeaseTTL)
	}
	seen := map[string]bool{}
	for i, j := range c.Jobs {
		switch {
		case j.Name == "":
			return fmt.Errorf("cleanup: Jobs[%d].Name is required", i)
		case seen[j.Name]:
			return fmt.Errorf("cleanup: Jobs[%d].Name %q is used twice", i, j.Name)
		case j.Run == nil:
			return fmt.Errorf("cleanup: Jobs[%d] (%s).Run is required", i, j.Name)
		case j.Timeout < 0:
			return fmt.Errorf("cleanup: Jobs[%d] (%s).Timeout must be >= 0", i, j.Name)
		}
		seen[j.Name] = true
		if _, err := ParseSchedule(j.Schedule); err != nil {
			return fmt.Errorf("cleanup: Jobs[%d] (%s).Schedule: %w", i, j.Name, err)
		}
	}
	return nil
}

// Scheduler runs jobs on their schedules, each tick of each job on exactly
// one instance of a cluster. See the package documentation.
type Scheduler struct {
	cfg     SchedulerConfig
	log     *slog.Logger
	cron    *cron.Cron
	jobs    []*scheduledJob
	metrics *jobMetrics

	ctx    context.Context
	cancel context.CancelFunc
	start  sync.Once
	stop   sync.Once
	// loops counts the claim and run loops of the jobs.
	loops sync.WaitGroup
}

type scheduledJob struct {
	Job
	schedule cron.Schedule
	ttl      time.Duration
	// fired carries the job's activations, in order, from the cron loop to
	// the job's claim loop (see firedSchedule).
	fired chan time.Time

	// The claim loop hands claimed ticks to the run loop through queue.
	mu      sync.Mutex
	running *claimedTick   // the run in progress on this instance
	queue   []*claimedTick // claimed ticks waiting to run, oldest first
	ready   chan struct{}  // a tick was queued
}

// claimedTick is a tick this instance claimed. waited is set when it was
// claimed while another run was in progress.
type claimedTick struct {
	run    *Run
	waited bool
}

// firedSchedule delivers a job's activations to its claim loop. The cron
// library passes nothing to a job, and a job that reads the clock once its
// goroutine runs can be past the next activation on a loaded machine. But
// the library calls Next once when it starts, then right after each start
// of the job, in its loop: the value the previous call returned is the
// activation just started. (Only the cron loop calls Next.)
type firedSchedule struct {
	cron.Schedule
	fired chan<- time.Time
	last  time.Time
	log   *slog.Logger
}

func (f *firedSchedule) Next(now time.Time) time.Time {
	if !f.last.IsZero() {
		select {
		case f.fired <- f.last:
		default:
			// The claim loop is more than cap(fired) activations behind:
			// it has been unable to reach the database for that long.
			f.log.Warn("job tick dropped: claims are too far behind", "tick", f.last)
		}
	}
	f.last = f.Schedule.Next(now)
	return f.last
}

// NewScheduler checks cfg and prepares the jobs; Start runs them.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Instance == "" {
		cfg.Instance = NewInstanceID()
	}
	log := cmp.Or(cfg.Logger, slog.Default()).With("component", "cron", "instance", cfg.Instance)
	s := &Scheduler{cfg: cfg, log: log}
	var names []string
	for _, j := range cfg.Jobs {
		sched, _ := ParseSchedule(j.Schedule) // validated
		ttl := cfg.LeaseTTL
		if ttl == 0 {
			ttl = min(max(interval(sched, time.Now().UTC()), time.Second), LeaseTTLMaxDefault)
		}
		j.Timeout = cmp.Or(j.Timeout, JobTimeoutDefault)
		s.jobs = append(s.jobs, &scheduledJob{Job: j, schedule: sched, ttl: ttl, fired: make(chan time.Time, 1024), ready: make(chan struct{}, 1)})
		names = append(names, j.Name)
	}
	m, err := newJobMetrics(cfg.Registerer, names)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	// The library's default chain has no panic recovery; a panic in a job
	// goroutine would end the process. Our cron jobs do nothing (see below),
	// and a panic inside a run is recovered where it is recorded as failed
	// (call), or in the claim (claim); this is the net for anything else.
	cl := cronLogger{log}
	s.cron = cron.New(cron.WithLocation(time.UTC), cron.WithLogger(cl), cron.WithChain(cron.Recover(cl)))
	for _, j := range s.jobs {
		// The cron library is the clock: each activation reaches the job's
		// claim loop through firedSchedule, in order, so the job itself has
		// nothing left to do. (Claim and run loops recover from panics.)
		s.cron.Schedule(&firedSchedule{Schedule: j.schedule, fired: j.fired, log: log.With("job", j.Name)}, cron.FuncJob(func() {}))
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Instance is this scheduler's holder name.
func (s *Scheduler) Instance() string { return s.cfg.Instance }

// Start begins scheduling. It returns at once.
func (s *Scheduler) Start() {
	s.start.Do(func() {
		for _, j := range s.jobs {
			s.log.Info("job scheduled", "job", j.Name, "schedule", j.Schedule, "lease_ttl", j.ttl)
			claimed := make(chan struct{})
			s.loops.Add(2)
			go func() {
				defer s.loops.Done()
				defer close(claimed)
				s.claimLoop(j)
			}()
			go func() {
				defer s.loops.Done()
				s.runLoop(j, claimed)
			}()
		}
		s.cron.Start()
	})
}

// Stop stops scheduling, cancels the runs in progress (they stop at their
// next statement; what they committed stays), records claimed ticks that
// had not started as skipped, and waits for all of it, or for ctx.
func (s *Scheduler) Stop(ctx context.Context) error {
	var err error
	s.stop.Do(func() {
		<-s.cron.Stop().Done() // its jobs do nothing: this is at once
		s.cancel()
		done := make(chan struct{})
		go func() {
			s.loops.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("cleanup: stop scheduler: runs still in progress: %w", ctx.Err())
		}
	})
	return err
}

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
	start, ok, err := s.cfg.Store.BeginJobRun(bctx, j.Name, s.cfg.Instance, tick, j.ttl)
	cancel()
	if err != nil {
		s.log.Warn("cannot start job run", "job", j.Name, "tick", tick, "error", err)
		return
	}
	if !ok {
		return
	}
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

// NewInstanceID returns host-pid-random, unique per process.
func NewInstanceID() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "dlq"), os.Getpid(), hex.EncodeToString(b[:]))
}

// cronLogger adapts slog to the cron library's logger. Its Info messages
// are per-activation chatter, kept at debug.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append([]any{"error", err}, kv...)...)
}
