package cron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

// Job names: lease names, job_runs.job and the job label of the metrics.
const (
	JobSummary  = "summary"
	JobCleanup  = "cleanup"
	JobCapacity = "capacity"
	JobAlerts   = "alerts"
	// JobCategories recomputes stored failure categories after the rules
	// change (categories.go).
	JobCategories = "categories"
	// JobPolicies runs the automatic replay policies (policies.go).
	JobPolicies = "policies"
	// JobBackfills does the work over existing rows that migrations leave
	// to it (backfills.go).
	JobBackfills = "backfills"
	// JobStatistics analyses dlq's growing tables where autovacuum does
	// not (statistics.go).
	JobStatistics = "statistics"
)

// Default schedules.
const (
	SummaryScheduleDefault    = "@every 1m"
	CleanupScheduleDefault    = "@every 10m"
	CapacityScheduleDefault   = "@every 1m"
	AlertsScheduleDefault     = "@every 1m"
	CategoriesScheduleDefault = "@every 1m"
	PoliciesScheduleDefault   = "@every 1m"
	BackfillsScheduleDefault  = "@every 1m"
	StatisticsScheduleDefault = "@every 1m"
)

// Schedules says when each job runs: a cron expression, @every <duration>,
// or "off". Empty means the default.
type Schedules struct {
	Summary    string
	Cleanup    string
	Capacity   string
	Alerts     string
	Categories string
	Policies   string
	Backfills  string
	Statistics string
}

// fields pairs each job name with its schedule's field, in the order the
// jobs are listed: the one list of the jobs' schedules.
func (s *Schedules) fields() []scheduleField {
	return []scheduleField{
		{JobSummary, "Summary", &s.Summary}, {JobCleanup, "Cleanup", &s.Cleanup},
		{JobCapacity, "Capacity", &s.Capacity}, {JobAlerts, "Alerts", &s.Alerts},
		{JobCategories, "Categories", &s.Categories}, {JobPolicies, "Policies", &s.Policies},
		{JobBackfills, "Backfills", &s.Backfills}, {JobStatistics, "Statistics", &s.Statistics},
	}
}

type scheduleField struct {
	job, field string
	spec       *string
}

// byJob pairs each job name with its schedule, in the order the jobs are
// listed.
func (s Schedules) byJob() []namedSchedule {
	var out []namedSchedule
	for _, f := range s.fields() {
		out = append(out, namedSchedule{f.job, f.field, *f.spec})
	}
	return out
}

type namedSchedule struct{ job, field, spec string }

// Only returns s with every schedule it leaves empty set to ScheduleOff:
// the instance runs the jobs s names and no other. (Empty otherwise means
// the job's default, "@every 1m" for most, which fires on each minute
// boundary; a test that runs one job and crosses a minute would meet the
// others, and a job that locks rows, as the backfills job does, makes
// retention and eviction pass over them.)
func Only(s Schedules) Schedules {
	for _, f := range s.fields() {
		if *f.spec == "" {
			*f.spec = ScheduleOff
		}
	}
	return s
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
	// Cleanup is what the cleanup and capacity jobs do: retention,
	// capacity and expiry. Optional; its Store and Registerer default to
	// this Config's.
	Cleanup cleanup.Config
	// Alerts configures the alert job.
	Alerts AlertsConfig
	// Categories configures the categories job. Optional.
	Categories CategoriesConfig
	// Policies are the automatic replay policies. Optional.
	Policies PoliciesConfig
	// Backfills configures the backfills job. Optional.
	Backfills BackfillsConfig
}

func (c *Config) setDefaults() {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Schedules.Summary = cmp.Or(c.Schedules.Summary, SummaryScheduleDefault)
	c.Schedules.Cleanup = cmp.Or(c.Schedules.Cleanup, CleanupScheduleDefault)
	c.Schedules.Capacity = cmp.Or(c.Schedules.Capacity, CapacityScheduleDefault)
	c.Schedules.Alerts = cmp.Or(c.Schedules.Alerts, AlertsScheduleDefault)
	c.Schedules.Categories = cmp.Or(c.Schedules.Categories, CategoriesScheduleDefault)
	c.Categories.setDefaults()
	c.Schedules.Policies = cmp.Or(c.Schedules.Policies, PoliciesScheduleDefault)
	c.Policies.setDefaults()
	c.Schedules.Backfills = cmp.Or(c.Schedules.Backfills, BackfillsScheduleDefault)
	c.Backfills.setDefaults()
	c.Schedules.Statistics = cmp.Or(c.Schedules.Statistics, StatisticsScheduleDefault)
	c.Summary.setDefaults()
	c.Cleanup.Store = cmp.Or(c.Cleanup.Store, c.Store)
	c.Cleanup.Registerer = cmp.Or(c.Cleanup.Registerer, c.Registerer)
	c.Alerts.setDefaults()
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("cron: "+format, a...)) }
	if c.Store == nil {
		bad("Config.Store is required")
	}
	for _, s := range c.Schedules.byJob() {
		if s.spec == ScheduleOff {
			continue
		}
		if _, err := ParseSchedule(s.spec); err != nil {
			bad("Config.Schedules.%s: %v", s.field, err)
		}
	}
	if c.Summary.Chunk < 1 {
		bad("Config.Summary.Chunk must be >= 1, got %d", c.Summary.Chunk)
	}
	if err := c.Alerts.Rules.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cron: Config.Alerts.Rules: %w", err))
	}
	if err := c.Policies.validate(); err != nil {
		errs = append(errs, fmt.Errorf("cron: Config.Policies: %w", err))
	}
	if err := c.Backfills.validate(); err != nil {
		errs = append(errs, fmt.Errorf("cron: Config.Backfills: %w", err))
	}
	return errors.Join(errs...)
}

// Service is the cron side of dlq: the scheduler with the summary, cleanup,
// capacity and alert jobs, the summary metrics, and the views the HTTP API
// shows.
type Service struct {
	cfg    Config
	sched  *Scheduler
	alerts *alertJob
}

// New checks cfg, registers the metrics and prepares the jobs; Start runs
// them.
func New(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	cleaner, err := cleanup.New(cfg.Cleanup)
	if err != nil {
		return nil, err
	}
	summary, err := newSummaryJob(cfg.Store, cfg.Registerer, cfg.Summary)
	if err != nil {
		return nil, err
	}
	var policyNames []string
	for _, p := range cfg.Policies.Policies {
		policyNames = append(policyNames, p.Name)
	}
	alertj, err := newAlertJob(cfg.Store, log, cfg.Registerer, cfg.Alerts, cfg.Schedules.Alerts, cleaner.Capacity(), policyNames)
	if err != nil {
		return nil, err
	}
	categories, err := newCategoriesJob(cfg.Store, cfg.Registerer, cfg.Categories)
	if err != nil {
		return nil, err
	}
	policies, err := newPoliciesJob(cfg.Store, cfg.Registerer, cfg.Policies)
	if err != nil {
		return nil, err
	}
	backfills, err := newBackfillsJob(cfg.Store, cfg.Registerer, cfg.Backfills)
	if err != nil {
		return nil, err
	}
	run := map[string]JobFunc{
		JobSummary:    summary.run,
		JobCleanup:    cleanupJob(cleaner),
		JobCapacity:   capacityJob(cleaner),
		JobAlerts:     alertj.run,
		JobCategories: categories.run,
		JobPolicies:   policies.run,
		JobBackfills:  backfills.run,
		JobStatistics: statisticsJob(cfg.Store),
	}
	var jobs []Job
	var names []string
	for _, s := range cfg.Schedules.byJob() {
		names = append(names, s.job)
		if s.spec != ScheduleOff && !cfg.Disabled {
			jobs = append(jobs, Job{Name: s.job, Schedule: s.spec, Run: run[s.job]})
		}
	}
	sched, err := NewScheduler(SchedulerConfig{
		Store: cfg.Store, Jobs: jobs, Instance: cfg.Instance, LeaseTTL: cfg.LeaseTTL,
		Logger: log, Registerer: cfg.Registerer,
	})
	if err != nil {
		return nil, err
	}
	caps := cleaner.Capacity()
	if _, err := promreg.Register(cfg.Registerer, newStatusCollector(cfg.Store, log, names, caps.MaxMessages, caps.MaxBytes)); err != nil {
		return nil, err
	}
	if _, err := promreg.Register(cfg.Registerer, newPolicyCollector(cfg.Store, log, cfg.Policies.Policies)); err != nil {
		return nil, err
	}
	if _, err := promreg.Register(cfg.Registerer, newBackfillCollector(cfg.Store, log)); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, sched: sched, alerts: alertj}, nil
}

// Start runs the jobs on their schedules. It returns at once.
func (s *Service) Start() { s.sched.Start() }

// Stop stops the jobs (see Scheduler.Stop).
func (s *Service) Stop(ctx context.Context) error { return s.sched.Stop(ctx) }

// Instance is this process's holder name.
func (s *Service) Instance() string { return s.sched.Instance() }

// schedule is job's schedule as the views show it: "off" when this
// instance runs no job.
func (s *Service) schedule(spec string) string {
	if s.cfg.Disabled {
		return ScheduleOff
	}
	return spec
}
