package cleanup

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/store"
)

// Defaults of Config.
const (
	RetentionDefault         = 30 * 24 * time.Hour
	BatchSizeDefault         = 1000
	BatchTimeoutDefault      = 30 * time.Second
	ControlCommandTTLDefault = 24 * time.Hour
	ReplayTaskTTLDefault     = 30 * 24 * time.Hour
	JobRunTTLDefault         = 7 * 24 * time.Hour
	// IngestInflightTTLDefault is how old an ingest_inflight row must be
	// before it may be deleted: far longer than any redelivery takes (see
	// package store, "Stale ingest batches").
	IngestInflightTTLDefault = time.Hour

	replayTaskBatch = 10 // a task may own millions of items
)

// Config configures retention, capacity and expiry.
type Config struct {
	// Store is the database. Required.
	Store *store.Store
	// Registerer receives dlq_cleanup_deleted_total and
	// dlq_capacity_evicted_total. Optional.
	Registerer prometheus.Registerer
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
	// and audit rows are deleted. Optional: 0 means the default (24h, 30
	// days, 7 days, and for audit rows: kept forever); KeepForever keeps
	// them forever (see ConfiguredTTL).
	ControlCommandTTL time.Duration
	ReplayTaskTTL     time.Duration
	JobRunTTL         time.Duration
	AuditTTL          time.Duration
	// IngestInflightTTL is the age past which ingest_inflight rows of other
	// processes' consumers are deleted, once Ingest has worked without
	// interruption for as long (see package store, "Stale ingest
	// batches"). Optional: 0 means IngestInflightTTLDefault; KeepForever
	// keeps them forever.
	IngestInflightTTL time.Duration
	// Ingest is this process's ingest, for that expiry. Optional: without
	// it no ingest_inflight row is deleted.
	Ingest Ingest
}

func (c *Config) setDefaults() {
	if c.Retention == nil {
		c.Retention = map[string]time.Duration{store.StatusReplayed: RetentionDefault, store.StatusAcknowledged: RetentionDefault}
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, BatchTimeoutDefault)
	c.ControlCommandTTL = cmp.Or(c.ControlCommandTTL, ControlCommandTTLDefault)
	c.ReplayTaskTTL = cmp.Or(c.ReplayTaskTTL, ReplayTaskTTLDefault)
	c.JobRunTTL = cmp.Or(c.JobRunTTL, JobRunTTLDefault)
	c.IngestInflightTTL = cmp.Or(c.IngestInflightTTL, IngestInflightTTLDefault)
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("cleanup: "+format, a...)) }
	if c.Store == nil {
		bad("Config.Store is required")
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
	}
	return errors.Join(errs...)
}
