package cron

import (
	"context"

	"github.com/dlq/dlq/cleanup"
)

// capacityJob is the capacity job: the capacity policy of package cleanup
// (Cleaner.EnforceCapacity), under the run's lease. A run that finds the
// store over a cap with nothing it may evict fails, with
// cleanup.ErrOverCapacity.
func capacityJob(c *cleanup.Cleaner) JobFunc {
	return func(ctx context.Context, r *Run) (int64, error) {
		return c.EnforceCapacity(ctx, r.Lease, r.Logger)
	}
}
