package cron

import (
	"context"
	"time"

	"github.com/dlq/dlq/store"
)

// statisticsLockWait is how long the statistics job waits for a table's
// lock (held by another ANALYZE, a VACUUM or an index build) before it
// leaves the table to its next run.
const statisticsLockWait = time.Second

// statisticsJob is the statistics job: where autovacuum is off, it
// analyses dlq's tables whose planner statistics grew stale, as autovacuum
// would (store.RefreshStatistics), so that statements prepared while a
// table was small are planned again for the table as it is. Where
// autovacuum runs it finds nothing to do. ANALYZE writes no row of dlq's
// and two runs of it are harmless, so it needs no fence beyond the tick's
// claim. The count is the tables analysed.
func statisticsJob(st *store.Store) JobFunc {
	return func(ctx context.Context, r *Run) (int64, error) {
		done, err := st.RefreshStatistics(ctx, statisticsLockWait)
		n := int64(0)
		for _, a := range done {
			if a.Skipped {
				r.Logger.Info("statistics: a table's lock did not come in time; the next run analyses it",
					"table", a.Table, "changed_rows", a.Changed, "lock_wait", statisticsLockWait)
				continue
			}
			n++
			r.Logger.Debug("statistics: analysed", "table", a.Table, "changed_rows", a.Changed, "took", a.Took)
		}
		return n, err
	}
}
