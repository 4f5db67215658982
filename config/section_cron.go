package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Cron configures the cron jobs: when each runs, and whether this instance
// runs any. Every instance may run every job; a lease in PostgreSQL makes
// each tick run on exactly one of them.
//
//	cron:
//	  summary: "@every 1m"        # cron expression (UTC), @hourly..., @every <duration>, or off
//	  cleanup: "@every 10m"
//	  capacity: "@every 1m"
//	  alerts: "@every 1m"
//	  categories: "@every 1m"     # recomputes stored categories after the rules change
//	  policies: "@every 1m"       # evaluates recovery.policies
//	  backfills: "@every 1m"      # work over existing rows left by migrations
//	  statistics: "@every 1m"     # ANALYZE of dlq's growing tables where autovacuum is off
//	  reconcile_interval: 1h      # between full summary reconciliation passes
//	  lease_ttl: 0s               # 0: the job's interval, at most 30s
//	  disabled: false             # true: this instance runs no job
type Cron struct {
	// Summary, Cleanup, Capacity and Alerts are the jobs' schedules. Env
	// DLQ_CRON_SUMMARY, DLQ_CRON_CLEANUP, DLQ_CRON_CAPACITY, DLQ_CRON_ALERTS.
	Summary  string `yaml:"summary"`
	Cleanup  string `yaml:"cleanup"`
	Capacity string `yaml:"capacity"`
	Alerts   string `yaml:"alerts"`
	// Categories and Policies are the schedules of the jobs that recompute
	// stored failure categories and run the automatic replay policies. Env
	// DLQ_CRON_CATEGORIES, DLQ_CRON_POLICIES.
	Categories string `yaml:"categories"`
	Policies   string `yaml:"policies"`
	// Backfills is the schedule of the job that does the work over
	// existing rows that migrations leave to it (docs/UPGRADING.md). Env
	// DLQ_CRON_BACKFILLS.
	Backfills string `yaml:"backfills"`
	// Statistics is the schedule of the job that analyses dlq's growing
	// tables where PostgreSQL's autovacuum is off (docs/OPERATIONS.md). Env
	// DLQ_CRON_STATISTICS.
	Statistics string `yaml:"statistics"`
	// ReconcileInterval is the time between full summary reconciliation
	// passes. Env DLQ_CRON_RECONCILE_INTERVAL.
	ReconcileInterval Duration `yaml:"reconcile_interval"`
	// LeaseTTL is how long a job's lease outlives its holder's last
	// renewal; 0 means the job's interval, at most 30s. Env DLQ_CRON_LEASE_TTL.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// Instance names this process in leases and job runs. Optional, default
	// host-pid-random. Env DLQ_INSTANCE.
	Instance string `yaml:"instance"`
	// Disabled makes this instance run no job. Env DLQ_CRON_DISABLED.
	Disabled bool `yaml:"disabled"`
}

// Cron defaults.
const (
	CronSummaryDefault    = "@every 1m"
	CronCleanupDefault    = "@every 10m"
	CronCapacityDefault   = "@every 1m"
	CronAlertsDefault     = "@every 1m"
	CronCategoriesDefault = "@every 1m"
	CronPoliciesDefault   = "@every 1m"
	CronBackfillsDefault  = "@every 1m"
	CronStatisticsDefault = "@every 1m"
	CronReconcileDefault  = time.Hour
	// CronOff disables a job.
	CronOff = "off"
)

func defaultCron() Cron {
	return Cron{
		Summary:           CronSummaryDefault,
		Cleanup:           CronCleanupDefault,
		Capacity:          CronCapacityDefault,
		Alerts:            CronAlertsDefault,
		Categories:        CronCategoriesDefault,
		Policies:          CronPoliciesDefault,
		Backfills:         CronBackfillsDefault,
		Statistics:        CronStatisticsDefault,
		ReconcileInterval: Duration(CronReconcileDefault),
	}
}

// cronEnvVars lists the environment variables of the cron section.
func cronEnvVars() []envVar {
	return []envVar{
		{"DLQ_CRON_SUMMARY", strVar(func(c *Config) *string { return &c.Cron.Summary })},
		{"DLQ_CRON_CLEANUP", strVar(func(c *Config) *string { return &c.Cron.Cleanup })},
		{"DLQ_CRON_CAPACITY", strVar(func(c *Config) *string { return &c.Cron.Capacity })},
		{"DLQ_CRON_ALERTS", strVar(func(c *Config) *string { return &c.Cron.Alerts })},
		{"DLQ_CRON_CATEGORIES", strVar(func(c *Config) *string { return &c.Cron.Categories })},
		{"DLQ_CRON_POLICIES", strVar(func(c *Config) *string { return &c.Cron.Policies })},
		{"DLQ_CRON_BACKFILLS", strVar(func(c *Config) *string { return &c.Cron.Backfills })},
		{"DLQ_CRON_STATISTICS", strVar(func(c *Config) *string { return &c.Cron.Statistics })},
		{"DLQ_CRON_RECONCILE_INTERVAL", durVar("DLQ_CRON_RECONCILE_INTERVAL", func(c *Config) *Duration { return &c.Cron.ReconcileInterval })},
		{"DLQ_CRON_LEASE_TTL", durVar("DLQ_CRON_LEASE_TTL", func(c *Config) *Duration { return &c.Cron.LeaseTTL })},
		{"DLQ_INSTANCE", strVar(func(c *Config) *string { return &c.Cron.Instance })},
		{"DLQ_CRON_DISABLED", cronBoolVar("DLQ_CRON_DISABLED", func(c *Config) *bool { return &c.Cron.Disabled })},
	}
}

func cronBoolVar(name string, dst func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("config: %s=%q is not a boolean (true or false)", name, v)
		}
		*dst(c) = b
		return nil
	}
}

// schedules are the jobs' schedules with their YAML keys and variables.
func (c *Cron) schedules() []struct {
	key, env string
	spec     *string
} {
	return []struct {
		key, env string
		spec     *string
	}{
		{"cron.summary", "DLQ_CRON_SUMMARY", &c.Summary},
		{"cron.cleanup", "DLQ_CRON_CLEANUP", &c.Cleanup},
		{"cron.capacity", "DLQ_CRON_CAPACITY", &c.Capacity},
		{"cron.alerts", "DLQ_CRON_ALERTS", &c.Alerts},
		{"cron.categories", "DLQ_CRON_CATEGORIES", &c.Categories},
		{"cron.policies", "DLQ_CRON_POLICIES", &c.Policies},
		{"cron.backfills", "DLQ_CRON_BACKFILLS", &c.Backfills},
		{"cron.statistics", "DLQ_CRON_STATISTICS", &c.Statistics},
	}
}

// trimSchedules drops the white space around each schedule, as the check
// reads it, so that the jobs read " off" as off too.
func (c *Cron) trimSchedules() {
	for _, s := range c.schedules() {
		*s.spec = strings.TrimSpace(*s.spec)
	}
}

// validateCron checks the cron section.
func (c *Config) validateCron() []error {
	var errs []error
	for _, s := range c.Cron.schedules() {
		if err := checkSchedule(*s.spec); err != nil {
			errs = append(errs, fmt.Errorf("config: %s / %s %q: %w", s.key, s.env, *s.spec, err))
		}
	}
	if c.Cron.ReconcileInterval <= 0 {
		errs = append(errs, fmt.Errorf("config: cron.reconcile_interval / DLQ_CRON_RECONCILE_INTERVAL %s must be > 0", c.Cron.ReconcileInterval.D()))
	}
	if c.Cron.LeaseTTL < 0 {
		errs = append(errs, fmt.Errorf("config: cron.lease_ttl / DLQ_CRON_LEASE_TTL %s must be >= 0 (0: the job's interval, at most 30s)", c.Cron.LeaseTTL.D()))
	}
	return errs
}

// checkSchedule accepts what the cron package's ParseSchedule accepts:
// "off", "@every <duration>" (at least 10ms), or a standard cron expression
// or descriptor.
func checkSchedule(spec string) error {
	spec = strings.TrimSpace(spec)
	if spec == CronOff {
		return nil
	}
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < 10*time.Millisecond {
			return fmt.Errorf("@every needs a duration of at least 10ms, e.g. @every 5m")
		}
		return nil
	}
	if err := parseCron(spec); err != nil {
		return fmt.Errorf("must be off, @every <duration>, a descriptor such as @hourly, or a cron expression (minute hour day month weekday): %w", err)
	}
	return nil
}

// parseCron is cron.ParseStandard without its panics (the library indexes
// past the end of "TZ=Zone" given with no fields after it).
func parseCron(spec string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("unparseable: %v", r)
		}
	}()
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return err
	}
	if s.Next(time.Now().UTC()).IsZero() {
		return fmt.Errorf("it never fires (no such date)")
	}
	return nil
}
