package cron

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	robfig "github.com/robfig/cron/v3"

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
	// holder. A fixed name (DLQ_INSTANCE) works as well, as long as no two
	// live processes share it (a pod name): a process's first claim of a
	// job takes its lease under a new token, closing the runs its
	// predecessor of the same name left running, and a process sees the
	// lease in its own name as its own, so two live processes of one name
	// would both run the job's ticks.
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
		return errors.New("cron: SchedulerConfig.Store is required")
	}
	if c.LeaseTTL < 0 {
		return fmt.Errorf("cron: SchedulerConfig.LeaseTTL must be >= 0, got %s", c.LeaseTTL)
	}
	seen := map[string]bool{}
	for i, j := range c.Jobs {
		switch {
		case j.Name == "":
			return fmt.Errorf("cron: Jobs[%d].Name is required", i)
		case seen[j.Name]:
			return fmt.Errorf("cron: Jobs[%d].Name %q is used twice", i, j.Name)
		case j.Run == nil:
			return fmt.Errorf("cron: Jobs[%d] (%s).Run is required", i, j.Name)
		case j.Timeout < 0:
			return fmt.Errorf("cron: Jobs[%d] (%s).Timeout must be >= 0", i, j.Name)
		}
		seen[j.Name] = true
		if _, err := ParseSchedule(j.Schedule); err != nil {
			return fmt.Errorf("cron: Jobs[%d] (%s).Schedule: %w", i, j.Name, err)
		}
	}
	return nil
}

// Scheduler runs jobs on their schedules, each tick of each job on exactly
// one instance of a cluster. See the package documentation.
type Scheduler struct {
	cfg     SchedulerConfig
	log     *slog.Logger
	cron    *robfig.Cron
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
	schedule robfig.Schedule
	ttl      time.Duration
	// fired carries the job's activations, in order, from the cron loop to
	// the job's claim loop (see firedSchedule).
	fired chan time.Time
	// claimedOnce is set once this process has claimed a tick of the job.
	// Only the claim loop touches it.
	claimedOnce bool

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
	robfig.Schedule
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
	s.cron = robfig.New(robfig.WithLocation(time.UTC), robfig.WithLogger(cl), robfig.WithChain(robfig.Recover(cl)))
	for _, j := range s.jobs {
		// The cron library is the clock: each activation reaches the job's
		// claim loop through firedSchedule, in order, so the job itself has
		// nothing left to do. (Claim and run loops recover from panics.)
		s.cron.Schedule(&firedSchedule{Schedule: j.schedule, fired: j.fired, log: log.With("job", j.Name)}, robfig.FuncJob(func() {}))
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
			err = fmt.Errorf("cron: stop scheduler: runs still in progress: %w", ctx.Err())
		}
	})
	return err
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
