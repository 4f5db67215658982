package cron

import (
	"context"

	"github.com/dlq/dlq/cleanup"
)

// cleanupJob is the cleanup job: retention and expiry, the work of
// package cleanup (Cleaner.DeleteExpired), under the run's lease.
func cleanupJob(c *cleanup.Cleaner) JobFunc {
	return func(ctx context.Context, r *Run) (int64, error) {
		return c.DeleteExpired(ctx, r.Lease, r.Logger)
	}
}
