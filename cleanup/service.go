package cleanup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

// Job names: lease names, job_runs.job and the job label of the metrics.
const (
	JobSummary  = "summary"
	JobCleanup  = "cleanup"
	JobCapacity = "capacity"
	JobAlerts   = "alerts"
)

// Default schedules.
const (
	SummaryScheduleDefault  = "@every 1m"
	CleanupScheduleDefault  = "@every 10m"
	CapacityScheduleDefault = "@every 1m"
	AlertsScheduleDefault   = "@every 1m"
)

// Expiry defaults.
const (
	ControlCommandTTLDefault = 24 * time.Hour
	ReplayTaskTTLDefault     = 30 * 24 * time.Hour
	replayTaskBatch          = 10 // a task may own millions of items
)

// Schedules says when each job runs: a cron expression, @every <duration>,
// or "off". Empty means the default.
type Schedules struct {
	Summary  string
	Cleanup  string
	Capacity string
	Alerts   string
}

// SummaryConfig tunes the summary job.
type SummaryConfig struct {
	// ReconcileInterval is the time between the end of one full
	// reconciliation pass and the start of the next. Optional, default
	// ReconcileIntervalDefault.
	ReconcileInterval time.Duration
	// Budget is roughly how long one run may spend reconciling before it
	// saves its place for the next tick. Optional, default
	// ReconcileBudgetDefault.
	Budget time.Duration
	// Chunk is the rows counted per statement. Optional, default
	// ReconcileChunkDefault.
	Chunk int
}

// AlertsConfig is what the alert job evaluates and whom it tells.
type AlertsConfig struct {
	// Rules are evaluated each tick. Optional, default
	// alerts.DefaultRuleSet() (used when Rules.Rules is nil).
	Rules alerts.RuleSet
	// Notifiers are the receivers besides the log. Optional.
	Notifiers []alerts.Notifier
	// MaxAttempts, InitialBackoff and MaxBackoff tune delivery retries.
	// Optional, defaults from package alerts.
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// Config configures the cron service: the scheduler and its four jobs.
type Config struct {
	// Store is the database. Required.
	Store *store.Store
	// Logger is optional, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Optional.
	Registerer prometheus.Registerer
	// Instance names this process in leases and job runs. Optional,
	// default NewInstanceID().
	Instance string
	// LeaseTTL overrides every job's lease TTL. Optional (see
	// SchedulerConfig.LeaseTTL).
	LeaseTTL time.Duration
	// Disabled runs no job on this instance; the metrics and views still
	// work. Optional.
	Disabled bool
	// Schedules of the jobs. Optional.
	Schedules Schedules
	// Summary tunes reconciliation. Optional.
	Summary SummaryConfig
	// Retention is the age after which resolved messages are deleted, by
	// status (replayed, acknowledged; no other status can expire). 0 keeps
	// that status forever. Optional: nil means RetentionDefault for both.
	Retention map[string]time.Duration
	// BatchSize is the rows deleted per transaction. Optional, default
	// BatchSizeDefault.
	BatchSize int
	// BatchTimeout bounds each batch. Optional, default BatchTimeoutDefault.
	BatchTimeout time.Duration
	// Pause waits between batches, leaving the database to ingest.
	// Optional, default 0.
	Pause time.Duration
	// Capacity is the capacity policy. Optional (no caps).
	Capacity Capacity
	// ControlCommandTTL, ReplayTaskTTL, JobRunTTL and AuditTTL are the ages
	// past which control-command answers, finished replay tasks, job runs
	// and audit rows are deleted. 0 means the default (24h, 30 days, 7 days,
	// and for audit rows: kept forever); a negative value keeps them
	// forever.
	ControlCommandTTL time.Duration
	ReplayTaskTTL     time.Duration
	JobRunTTL         time.Duration
	AuditTTL          time.Duration
	// IngestInflightTTL is the age past which ingest_inflight rows of other
	// processes' consumers are deleted, once Ingest has worked without
	// interruption for as long (see package store, "Stale ingest
	// batches"). 0 means IngestInflightTTLDefault; a negative value keeps
	// them forever.
	IngestInflightTTL time.Duration
	// Ingest is this process's ingest, for that expiry. Optional: without
	// it no ingest_inflight row is deleted.
	Ingest Ingest
	// Alerts configures the alert job.
	Alerts AlertsConfig
}

func (c *Config) setDefaults() {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Schedules.Summary = cmp.Or(c.Schedules.Summary, SummaryScheduleDefault)
	c.Schedules.Cleanup = cmp.Or(c.Schedules.Cleanup, CleanupScheduleDefault)
	c.Schedules.Capacity = cmp.Or(c.Schedules.Capacity, CapacityScheduleDefault)
	c.Schedules.Alerts = cmp.Or(c.Schedules.Alerts, AlertsScheduleDefault)
	c.Summary.ReconcileInterval = cmp.Or(c.Summary.ReconcileInterval, ReconcileIntervalDefault)
	c.Summary.Budget = cmp.Or(c.Summary.Budget, ReconcileBudgetDefault)
	c.Summary.Chunk = cmp.Or(c.Summary.Chunk, ReconcileChunkDefault)
	if c.Retention == nil {
		c.Retention = map[string]time.Duration{store.StatusReplayed: RetentionDefault, store.StatusAcknowledged: RetentionDefault}
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, BatchTimeoutDefault)
	c.ControlCommandTTL = cmp.Or(c.ControlCommandTTL, ControlCommandTTLDefault)
	c.ReplayTaskTTL = cmp.Or(c.ReplayTaskTTL, ReplayTaskTTLDefault)
	c.JobRunTTL = cmp.Or(c.JobRunTTL, JobRunTTLDefault)
	c.IngestInflightTTL = cmp.Or(c.IngestInflightTTL, IngestInflightTTLDefault)
	if c.Alerts.Rules.Rules == nil {
		c.Alerts.Rules = alerts.DefaultRuleSet()
	}
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("cleanup: "+format, a...)) }
	if c.Store == nil {
		bad("Config.Store is required")
	}
	for name, spec := range map[string]string{
		"Summary": c.Schedules.Summary, "Cleanup": c.Schedules.Cleanup,
		"Capacity": c.Schedules.Capacity, "Alerts": c.Schedules.Alerts,
	} {
		if spec == ScheduleOff {
			continue
		}
		if _, err := ParseSchedule(spec); err != nil {
			bad("Config.Schedules.%s: %v", name, err)
		}
	}
	for _, st := range slices.Sorted(maps.Keys(c.Retention)) {
		if !slices.Contains(store.RetentionStatuses, st) {
			bad("Config.Retention: status %q cannot expire by age (only %v; pending and replaying messages are never deleted by age, see Capacity.AllowEvictPending)", st, store.RetentionStatuses)
		}
		if c.Retention[st] < 0 {
			bad("Config.Retention[%s] must be >= 0 (0 keeps forever), got %s", st, c.Retention[st])
		}
	}
	switch {
	case c.BatchSize < 1:
		bad("Config.BatchSize must be >= 1, got %d", c.BatchSize)
	case c.BatchTimeout < 0:
		bad("Config.BatchTimeout must be >= 0, got %s", c.BatchTimeout)
	case c.Pause < 0:
		bad("Config.Pause must be >= 0, got %s", c.Pause)
	case c.Capacity.MaxMessages < 0 || c.Capacity.MaxBytes < 0:
		bad("Config.Capacity: MaxMessages and MaxBytes must be >= 0 (0 is no cap)")
	case c.Summary.Chunk < 1:
		bad("Config.Summary.Chunk must be >= 1, got %d", c.Summary.Chunk)
	}
	if err := c.Alerts.Rules.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cleanup: Config.Alerts.Rules: %w", err))
	}
	return errors.Join(errs...)
}

// Service is the cron side of dlq: the scheduler with the summary, cleanup,
// capacity and alert jobs, the summary metrics, and the views the HTTP API
// shows.
type Service struct {
	cfg        Config
	sched      *Scheduler
	dispatcher *alerts.Dispatcher
}

// New checks cfg, registers the metrics and prepares the jobs; Start runs
// them.
func New(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	work, err := newWorkMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	areg := cfg.Registerer
	if areg == nil {
		areg = prometheus.NewRegistry() // the dispatcher insists on one
	}
	var ruleNames []string
	for _, r := range cfg.Alerts.Rules.Rules {
		ruleNames = append(ruleNames, r.Name)
	}
	disp, err := alerts.NewDispatcher(alerts.DispatcherConfig{
		Logger: log.With("component", "alerts"), Registerer: areg, Notifiers: cfg.Alerts.Notifiers,
		RuleNames: ruleNames, MaxAttempts: cfg.Alerts.MaxAttempts,
		InitialBackoff: cfg.Alerts.InitialBackoff, MaxBackoff: cfg.Alerts.MaxBackoff,
	})
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, dispatcher: disp}

	expiries := []Expiry{
		{Name: "control_commands", TTL: cfg.ControlCommandTTL, Delete: func(ctx context.Context, _ store.Lease, before time.Time, limit int) (int64, error) {
			// Not fenced (the replay feature's helper takes no lease):
			// deleting expired answers twice is harmless.
			return cfg.Store.DeleteExpiredControlCommands(ctx, before, limit)
		}},
		{Name: "replay_tasks", TTL: cfg.ReplayTaskTTL, BatchSize: replayTaskBatch, Delete: cfg.Store.DeleteFinishedReplayTasksBefore},
		{Name: "job_runs", TTL: cfg.JobRunTTL, Delete: cfg.Store.DeleteJobRunsBefore},
		{Name: "audit_log", TTL: cfg.AuditTTL, Delete: cfg.Store.DeleteAuditBefore},
		inflightExpiry(cfg.Store, cfg.Ingest, cfg.IngestInflightTTL, time.Now),
	}
	summary := &summaryJob{st: cfg.Store, metrics: work, every: cfg.Summary.ReconcileInterval, budget: cfg.Summary.Budget, chunk: cfg.Summary.Chunk}
	clean := &cleanupJob{st: cfg.Store, metrics: work, retention: cfg.Retention, expiries: expiries,
		batchSize: cfg.BatchSize, batchTimeout: cfg.BatchTimeout, pause: cfg.Pause}
	capj := &capacityJob{st: cfg.Store, metrics: work, cap: cfg.Capacity,
		batchSize: cfg.BatchSize, batchTimeout: cfg.BatchTimeout, pause: cfg.Pause}
	alertj := &alertJob{st: cfg.Store, log: log, rules: cfg.Alerts.Rules, dispatcher: disp, capacity: cfg.Capacity}

	var jobs []Job
	var names []string
	for _, j := range []Job{
		{Name: JobSummary, Schedule: cfg.Schedules.Summary, Run: summary.run},
		{Name: JobCleanup, Schedule: cfg.Schedules.Cleanup, Run: clean.run},
		{Name: JobCapacity, Schedule: cfg.Schedules.Capacity, Run: capj.run},
		{Name: JobAlerts, Schedule: cfg.Schedules.Alerts, Run: alertj.run},
	} {
		names = append(names, j.Name)
		if j.Schedule != ScheduleOff && !cfg.Disabled {
			jobs = append(jobs, j)
		}
	}
	s.sched, err = NewScheduler(SchedulerConfig{
		Store: cfg.Store, Jobs: jobs, Instance: cfg.Instance, LeaseTTL: cfg.LeaseTTL,
		Logger: log, Registerer: cfg.Registerer,
	})
	if err != nil {
		return nil, err
	}
	if _, err := promreg.Register(cfg.Registerer, newStatusCollector(cfg.Store, log, names, cfg.Capacity.MaxMessages, cfg.Capacity.MaxBytes)); err != nil {
		return nil, fmt.Errorf("cleanup: register metrics: %w", err)
	}
	return s, nil
}

// Start runs the jobs on their schedules. It returns at once.
func (s *Service) Start() { s.sched.Start() }

// Stop stops the jobs (see Scheduler.Stop).
func (s *Service) Stop(ctx context.Context) error { return s.sched.Stop(ctx) }

// Instance is this process's holder name.
func (s *Service) Instance() string { return s.sched.Instance() }

// JobsView is what GET /api/v1/jobs shows.
type JobsView struct {
	// Instance is the instance that answered.
	Instance string    `json:"instance"`
	Jobs     []JobView `json:"jobs"`
}

// JobView is one job: its schedule, who holds it, and its recent runs.
type JobView struct {
	Name string `json:"name"`
	// Schedule is the configured schedule, "off" when disabled.
	Schedule string `json:"schedule"`
	// Lease is the current (or last) holder; null if it never ran.
	Lease *store.JobLease `json:"lease"`
	// LastSuccessAt is when a run last succeeded, on any instance.
	LastSuccessAt *time.Time `json:"last_success_at"`
	// Runs are the most recent runs, newest first.
	Runs []store.JobRun `json:"runs"`
}

// RecentRunsPerJob is how many runs JobsView lists per job.
const RecentRunsPerJob = 10

// Jobs returns every job with its lease, last success and recent runs.
func (s *Service) Jobs(ctx context.Context) (JobsView, error) {
	st := s.cfg.Store
	leases, err := st.JobLeases(ctx)
	if err != nil {
		return JobsView{}, err
	}
	byJob := map[string]store.JobLease{}
	for _, l := range leases {
		byJob[l.Job] = l
	}
	names := []string{JobSummary, JobCleanup, JobCapacity, JobAlerts}
	last, err := st.LastJobSuccesses(ctx, names)
	if err != nil {
		return JobsView{}, err
	}
	sched := map[string]string{
		JobSummary: s.cfg.Schedules.Summary, JobCleanup: s.cfg.Schedules.Cleanup,
		JobCapacity: s.cfg.Schedules.Capacity, JobAlerts: s.cfg.Schedules.Alerts,
	}
	out := JobsView{Instance: s.Instance(), Jobs: make([]JobView, 0, len(names))}
	for _, n := range names {
		v := JobView{Name: n, Schedule: sched[n]}
		if s.cfg.Disabled {
			v.Schedule = ScheduleOff
		}
		if l, ok := byJob[n]; ok {
			v.Lease = &l
		}
		if t, ok := last[n]; ok {
			v.LastSuccessAt = &t
		}
		if v.Runs, err = st.JobRuns(ctx, n, RecentRunsPerJob); err != nil {
			return JobsView{}, err
		}
		if v.Runs == nil {
			v.Runs = []store.JobRun{}
		}
		out.Jobs = append(out.Jobs, v)
	}
	return out, nil
}

// Alerts returns the rules and the saved alert state.
func (s *Service) Alerts(ctx context.Context) (AlertsView, error) {
	state, err := loadAlertState(ctx, s.cfg.Store)
	if err != nil {
		return AlertsView{}, fmt.Errorf("cleanup: read alert state: %w", err)
	}
	v := AlertsView{Rules: s.cfg.Alerts.Rules.View(), Alerts: state.View(), Schedule: s.cfg.Schedules.Alerts}
	if s.cfg.Disabled {
		v.Schedule = ScheduleOff
	}
	if !state.EvaluatedAt.IsZero() {
		t := state.EvaluatedAt
		v.EvaluatedAt = &t
	}
	return v, nil
}

// ScheduleInterval is the time between two activations of spec (0 for
// "off" or an invalid spec), e.g. to tell Alertmanager notifiers how often
// alerts are evaluated.
func ScheduleInterval(spec string) time.Duration {
	s, err := ParseSchedule(spec)
	if err != nil {
		return 0
	}
	return interval(s, time.Now().UTC())
}
