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
	"sync/atomic"
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
}

type scheduledJob struct {
	Job
	schedule cron.Schedule
	ttl      time.Duration
	running  atomic.Bool
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
		s.jobs = append(s.jobs, &scheduledJob{Job: j, schedule: sched, ttl: ttl})
		names = append(names, j.Name)
	}
	m, err := newJobMetrics(cfg.Registerer, names)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	// The library's default chain has no panic recovery; a panic in a job
	// goroutine would end the process. runOnce recovers too (to record the
	// run as failed); this is the safety net for anything outside it.
	cl := cronLogger{log}
	s.cron = cron.New(cron.WithLocation(time.UTC), cron.WithLogger(cl), cron.WithChain(cron.Recover(cl)))
	for _, j := range s.jobs {
		s.cron.Schedule(j.schedule, cron.FuncJob(func() { s.fire(j) }))
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
		}
		s.cron.Start()
	})
}

// Stop stops scheduling, cancels the runs in progress (they stop at their
// next statement; what they committed stays) and waits for them to record
// their end, or for ctx.
func (s *Scheduler) Stop(ctx context.Context) error {
	var err error
	s.stop.Do(func() {
		done := s.cron.Stop()
		s.cancel()
		select {
		case <-done.Done():
		case <-ctx.Done():
			err = fmt.Errorf("cleanup: stop scheduler: runs still in progress: %w", ctx.Err())
		}
	})
	return err
}

// fire is called by the cron library at each activation of j.
func (s *Scheduler) fire(j *scheduledJob) {
	if s.ctx.Err() != nil {
		return
	}
	tick := lastActivation(j.schedule, time.Now().UTC())
	if !j.running.CompareAndSwap(false, true) {
		// Still running the previous tick on this instance, which holds
		// the lease: nobody runs this tick.
		s.log.Info("job still running; tick skipped", "job", j.Name, "tick", tick)
		return
	}
	defer j.running.Store(false)
	s.runOnce(j, tick)
}

// runOnce takes the lease and the tick and, if both are ours, runs the job.
func (s *Scheduler) runOnce(j *scheduledJob, tick time.Time) {
	ctx := s.ctx
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	start, ok, err := s.cfg.Store.BeginJobRun(bctx, j.Name, s.cfg.Instance, tick, j.ttl)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot start job run", "job", j.Name, "tick", tick, "error", err)
		}
		return
	}
	if !ok {
		return
	}
	run := &Run{
		ID: start.RunID, Job: j.Name, Tick: tick, Lease: start.Lease,
		Logger: s.log.With("job", j.Name, "tick", tick, "run_id", start.RunID, "token", start.Lease.Token),
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
