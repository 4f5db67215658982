package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Cleanup configures retention, batching, the capacity policy and the
// expiry of bookkeeping records.
//
//	cleanup:
//	  retention:               # age after which resolved messages are deleted; 0 keeps them
//	    replayed: 720h
//	    acknowledged: 720h
//	  batch_size: 1000
//	  batch_timeout: 30s
//	  pause: 10ms              # wait between batches, to leave the database to ingest
//	  max_messages: 0          # capacity caps, 0 = none
//	  max_bytes: 0
//	  allow_evict_pending: false
//	  control_command_ttl: 24h
//	  replay_task_ttl: 720h
//	  job_run_ttl: 168h
//	  audit_ttl: 0s            # 0 keeps the audit log forever
//	  ingest_inflight_ttl: 1h  # 0 keeps unconfirmed ingest batches forever
type Cleanup struct {
	// Retention maps replayed and acknowledged to the age (since replayed_at
	// or acknowledged_at) after which such messages are deleted; 0 keeps
	// them. Pending and replaying messages never expire. Env
	// DLQ_RETENTION_REPLAYED, DLQ_RETENTION_ACKNOWLEDGED.
	Retention map[string]Duration `yaml:"retention"`
	// BatchSize is the rows deleted per transaction. Env DLQ_CLEANUP_BATCH_SIZE.
	BatchSize int `yaml:"batch_size"`
	// BatchTimeout bounds each batch. Env DLQ_CLEANUP_BATCH_TIMEOUT.
	BatchTimeout Duration `yaml:"batch_timeout"`
	// Pause waits between batches, so a large cleanup leaves PostgreSQL to
	// ingest (docs/BENCHMARKS.md, "Cleanup and status"); 0 deletes flat
	// out. Env DLQ_CLEANUP_PAUSE.
	Pause Duration `yaml:"pause"`
	// MaxMessages and MaxBytes cap the store (every status); 0 is no cap.
	// Env DLQ_MAX_MESSAGES, DLQ_MAX_BYTES.
	MaxMessages int64 `yaml:"max_messages"`
	MaxBytes    int64 `yaml:"max_bytes"`
	// AllowEvictPending lets the capacity policy evict pending messages
	// once no resolved one is left. Env DLQ_ALLOW_EVICT_PENDING.
	AllowEvictPending bool `yaml:"allow_evict_pending"`
	// ControlCommandTTL, ReplayTaskTTL, JobRunTTL and AuditTTL are the ages
	// past which control-command answers, finished replay tasks, job runs
	// and audit rows are deleted; 0 keeps them. Env DLQ_CONTROL_COMMAND_TTL,
	// DLQ_REPLAY_TASK_TTL, DLQ_JOB_RUN_TTL, DLQ_AUDIT_TTL.
	ControlCommandTTL Duration `yaml:"control_command_ttl"`
	ReplayTaskTTL     Duration `yaml:"replay_task_ttl"`
	JobRunTTL         Duration `yaml:"job_run_ttl"`
	AuditTTL          Duration `yaml:"audit_ttl"`
	// IngestInflightTTL is the age past which ingest_inflight rows (batches
	// whose acknowledgement was never confirmed) of other processes are
	// deleted, once this process's ingest has worked for as long without
	// interruption; 0 keeps them. It must be far longer than any
	// redelivery takes (see package store, "Stale ingest batches"). Env
	// DLQ_INGEST_INFLIGHT_TTL.
	IngestInflightTTL Duration `yaml:"ingest_inflight_ttl"`
}

// Cleanup defaults.
const (
	RetentionDefault         = 30 * 24 * time.Hour
	CleanupBatchSizeDefault  = 1000
	CleanupBatchTimeout      = 30 * time.Second
	CleanupPauseDefault      = 10 * time.Millisecond
	ControlCommandTTLDefault = 24 * time.Hour
	ReplayTaskTTLDefault     = 30 * 24 * time.Hour
	JobRunTTLDefault         = 7 * 24 * time.Hour
	IngestInflightTTLDefault = time.Hour
	// IngestInflightTTLMin is the shortest ingest_inflight TTL accepted:
	// shorter ones would drop batches whose deliveries may still come back.
	IngestInflightTTLMin = time.Minute
)

// RetentionStatuses are the statuses that may expire by age.
var RetentionStatuses = []string{"replayed", "acknowledged"}

func defaultCleanup() Cleanup {
	return Cleanup{
		Retention:         map[string]Duration{"replayed": Duration(RetentionDefault), "acknowledged": Duration(RetentionDefault)},
		BatchSize:         CleanupBatchSizeDefault,
		BatchTimeout:      Duration(CleanupBatchTimeout),
		Pause:             Duration(CleanupPauseDefault),
		ControlCommandTTL: Duration(ControlCommandTTLDefault),
		ReplayTaskTTL:     Duration(ReplayTaskTTLDefault),
		JobRunTTL:         Duration(JobRunTTLDefault),
		IngestInflightTTL: Duration(IngestInflightTTLDefault),
	}
}

// cleanupEnvVars lists the environment variables of the cleanup section.
func cleanupEnvVars() []envVar {
	retention := func(status string) func(*Config, string) error {
		name := "DLQ_RETENTION_" + strings.ToUpper(status)
		return func(c *Config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("config: %s=%q is not a duration (use e.g. 720h; 0 keeps them)", name, v)
			}
			if c.Cleanup.Retention == nil {
				c.Cleanup.Retention = map[string]Duration{}
			}
			c.Cleanup.Retention[status] = Duration(d)
			return nil
		}
	}
	return []envVar{
		{"DLQ_RETENTION_REPLAYED", retention("replayed")},
		{"DLQ_RETENTION_ACKNOWLEDGED", retention("acknowledged")},
		{"DLQ_CLEANUP_BATCH_SIZE", intVar("DLQ_CLEANUP_BATCH_SIZE", func(c *Config) *int { return &c.Cleanup.BatchSize })},
		{"DLQ_CLEANUP_BATCH_TIMEOUT", durVar("DLQ_CLEANUP_BATCH_TIMEOUT", func(c *Config) *Duration { return &c.Cleanup.BatchTimeout })},
		{"DLQ_CLEANUP_PAUSE", durVar("DLQ_CLEANUP_PAUSE", func(c *Config) *Duration { return &c.Cleanup.Pause })},
		{"DLQ_MAX_MESSAGES", cleanupInt64Var("DLQ_MAX_MESSAGES", func(c *Config) *int64 { return &c.Cleanup.MaxMessages })},
		{"DLQ_MAX_BYTES", cleanupInt64Var("DLQ_MAX_BYTES", func(c *Config) *int64 { return &c.Cleanup.MaxBytes })},
		{"DLQ_ALLOW_EVICT_PENDING", cronBoolVar("DLQ_ALLOW_EVICT_PENDING", func(c *Config) *bool { return &c.Cleanup.AllowEvictPending })},
		{"DLQ_CONTROL_COMMAND_TTL", durVar("DLQ_CONTROL_COMMAND_TTL", func(c *Config) *Duration { return &c.Cleanup.ControlCommandTTL })},
		{"DLQ_REPLAY_TASK_TTL", durVar("DLQ_REPLAY_TASK_TTL", func(c *Config) *Duration { return &c.Cleanup.ReplayTaskTTL })},
		{"DLQ_JOB_RUN_TTL", durVar("DLQ_JOB_RUN_TTL", func(c *Config) *Duration { return &c.Cleanup.JobRunTTL })},
		{"DLQ_AUDIT_TTL", durVar("DLQ_AUDIT_TTL", func(c *Config) *Duration { return &c.Cleanup.AuditTTL })},
		{"DLQ_INGEST_INFLIGHT_TTL", durVar("DLQ_INGEST_INFLIGHT_TTL", func(c *Config) *Duration { return &c.Cleanup.IngestInflightTTL })},
	}
}

func cleanupInt64Var(name string, dst func(*Config) *int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("config: %s=%q is not a whole number", name, v)
		}
		*dst(c) = n
		return nil
	}
}

// validateCleanup checks the cleanup section.
func (c *Config) validateCleanup() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config: "+format, a...)) }
	cl := c.Cleanup
	for _, st := range slices.Sorted(maps.Keys(cl.Retention)) {
		if !slices.Contains(RetentionStatuses, st) {
			bad("cleanup.retention.%s: only %s messages expire by age; pending and replaying messages are never deleted by age (see cleanup.allow_evict_pending for the capacity policy)",
				st, strings.Join(RetentionStatuses, " and "))
			continue
		}
		if cl.Retention[st] < 0 {
			bad("cleanup.retention.%s / DLQ_RETENTION_%s %s must be >= 0 (0 keeps them)", st, strings.ToUpper(st), cl.Retention[st].D())
		}
	}
	if cl.BatchSize < 1 || cl.BatchSize > 100000 {
		bad("cleanup.batch_size / DLQ_CLEANUP_BATCH_SIZE %d must be between 1 and 100000", cl.BatchSize)
	}
	if cl.BatchTimeout <= 0 {
		bad("cleanup.batch_timeout / DLQ_CLEANUP_BATCH_TIMEOUT %s must be > 0", cl.BatchTimeout.D())
	}
	if cl.Pause < 0 {
		bad("cleanup.pause / DLQ_CLEANUP_PAUSE %s must be >= 0", cl.Pause.D())
	}
	if cl.MaxMessages < 0 {
		bad("cleanup.max_messages / DLQ_MAX_MESSAGES %d must be >= 0 (0 is no cap)", cl.MaxMessages)
	}
	if cl.MaxBytes < 0 {
		bad("cleanup.max_bytes / DLQ_MAX_BYTES %d must be >= 0 (0 is no cap)", cl.MaxBytes)
	}
	for _, t := range []struct {
		key, env string
		d        Duration
	}{
		{"control_command_ttl", "DLQ_CONTROL_COMMAND_TTL", cl.ControlCommandTTL},
		{"replay_task_ttl", "DLQ_REPLAY_TASK_TTL", cl.ReplayTaskTTL},
		{"job_run_ttl", "DLQ_JOB_RUN_TTL", cl.JobRunTTL},
		{"audit_ttl", "DLQ_AUDIT_TTL", cl.AuditTTL},
	} {
		if t.d < 0 {
			bad("cleanup.%s / %s %s must be >= 0 (0 keeps them)", t.key, t.env, t.d.D())
		}
	}
	if d := cl.IngestInflightTTL; d != 0 && d < Duration(IngestInflightTTLMin) {
		bad("cleanup.ingest_inflight_ttl / DLQ_INGEST_INFLIGHT_TTL %s must be 0 (keep them) or at least %s: a batch younger than that may still have deliveries coming back",
			d.D(), IngestInflightTTLMin)
	}
	return errs
}
