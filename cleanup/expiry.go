package cleanup

import (
	"context"
	"time"

	"github.com/dlq/dlq/store"
)

// Expiry is one kind of record DeleteExpired deletes once it is older than
// TTL, besides messages: job runs, audit rows, and records other features
// keep (control-command answers, finished replay tasks, unconfirmed ingest
// batches).
type Expiry struct {
	// Name is used in logs ("job_runs", "control_commands").
	Name string
	// TTL is the age past which records go (see keptForever).
	TTL time.Duration
	// BatchSize overrides Config.BatchSize for this kind. Optional.
	BatchSize int
	// Delete deletes up to limit records older than before, under lease,
	// and returns how many it deleted.
	Delete func(ctx context.Context, lease store.Lease, before time.Time, limit int) (int64, error)
}

// expiries are the kinds of record cfg expires, in the order they go.
func expiries(cfg Config, now func() time.Time) []Expiry {
	st := cfg.Store
	return []Expiry{
		{Name: "control_commands", TTL: cfg.ControlCommandTTL, Delete: func(ctx context.Context, _ store.Lease, before time.Time, limit int) (int64, error) {
			// Not fenced (the replay feature's helper takes no lease):
			// deleting expired answers twice is harmless.
			return st.DeleteExpiredControlCommands(ctx, before, limit)
		}},
		{Name: "replay_tasks", TTL: cfg.ReplayTaskTTL, BatchSize: replayTaskBatch, Delete: st.DeleteFinishedReplayTasksBefore},
		{Name: "job_runs", TTL: cfg.JobRunTTL, Delete: st.DeleteJobRunsBefore},
		{Name: "audit_log", TTL: cfg.AuditTTL, Delete: st.DeleteAuditBefore},
		// Not configurable: nothing reads hours older than a day.
		{Name: "queue_activity", TTL: store.QueueActivityKeep, Delete: st.DeleteQueueActivityBefore},
		inflightExpiry(st, cfg.Ingest, cfg.IngestInflightTTL, now),
	}
}
