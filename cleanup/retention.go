package cleanup

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/dlq/dlq/store"
)

// Cleanup defaults.
const (
	RetentionDefault    = 30 * 24 * time.Hour
	BatchSizeDefault    = 1000
	BatchTimeoutDefault = 30 * time.Second
	JobRunTTLDefault    = 7 * 24 * time.Hour
)

// Expiry is one kind of record the cleanup job deletes once it is older than
// TTL, besides messages: job runs, audit rows, and records other features
// keep (control-command answers, finished replay tasks).
type Expiry struct {
	// Name is used in logs ("job_runs", "control_commands").
	Name string
	// TTL is the age past which records go. 0 or less keeps them forever.
	TTL time.Duration
	// BatchSize overrides the job's batch size for this kind. Optional.
	BatchSize int
	// Delete deletes up to limit records older than before, under lease,
	// and returns how many it deleted.
	Delete func(ctx context.Context, lease store.Lease, before time.Time, limit int) (int64, error)
}

// cleanupJob deletes what has outlived its retention: resolved messages
// (per status, adjusting queue_summary and auditing in the same
// transaction), then every Expiry. Deletion goes in batches, each its own
// short transaction with its own timeout, until a batch comes back short,
// so ingest never waits behind it for more than one batch; Pause between
// batches gives ingest more room still.
type cleanupJob struct {
	st           *store.Store
	metrics      *workMetrics
	retention    map[string]time.Duration
	expiries     []Expiry
	batchSize    int
	batchTimeout time.Duration
	pause        time.Duration
}

func (j *cleanupJob) run(ctx context.Context, r *Run) (int64, error) {
	now := time.Now()
	var total int64
	var errs []error
	for _, status := range store.RetentionStatuses {
		ttl := j.retention[status]
		if ttl <= 0 {
			continue
		}
		cutoff := now.Add(-ttl)
		n, err := batches(ctx, j.batchSize, j.batchTimeout, j.pause, func(ctx context.Context) (int64, error) {
			res, err := j.st.DeleteResolvedBefore(ctx, r.Lease, status, cutoff, j.batchSize)
			j.metrics.deleted.WithLabelValues(status).Add(float64(res.Messages))
			return res.Messages, err
		})
		total += n
		if n > 0 {
			r.Logger.Info("retention deleted messages", "status", status, "deleted", n, "resolved_before", cutoff)
		}
		if err != nil {
			if stop(ctx, err) {
				return total, err
			}
			errs = append(errs, err)
		}
	}
	for _, e := range j.expiries {
		if e.TTL <= 0 || e.Delete == nil {
			continue
		}
		cutoff := now.Add(-e.TTL)
		size := cmp.Or(e.BatchSize, j.batchSize)
		n, err := batches(ctx, size, j.batchTimeout, j.pause, func(ctx context.Context) (int64, error) {
			return e.Delete(ctx, r.Lease, cutoff, size)
		})
		total += n
		if n > 0 {
			r.Logger.Info("expired records deleted", "records", e.Name, "deleted", n, "older_than", cutoff)
		}
		if err != nil {
			if stop(ctx, err) {
				return total, err
			}
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// stop reports whether the run must end rather than go on with its next
// kind of work.
func stop(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, store.ErrLeaseLost)
}

// batches calls batch until it returns fewer than size, an error, or ctx
// ends. Each call gets its own timeout; pause waits between calls.
func batches(ctx context.Context, size int, timeout, pause time.Duration, batch func(context.Context) (int64, error)) (int64, error) {
	var total int64
	for {
		bctx, cancel := context.WithTimeout(ctx, timeout)
		n, err := batch(bctx)
		cancel()
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(size) {
			return total, nil
		}
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return total, ctx.Err()
			case <-t.C:
			}
		} else if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}
