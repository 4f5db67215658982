package cleanup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlq/dlq/store"
)

// Capacity is the capacity policy. A zero cap is no cap.
type Capacity struct {
	// MaxMessages caps the number of stored messages (every status).
	MaxMessages int64
	// MaxBytes caps the stored body bytes (every status).
	MaxBytes int64
	// AllowEvictPending lets the policy evict pending messages once no
	// resolved message is left to evict. Off by default: pending messages
	// are work nobody has looked at, and losing them must be a decision.
	AllowEvictPending bool
}

func (c Capacity) enabled() bool { return c.MaxMessages > 0 || c.MaxBytes > 0 }

// capacityJob enforces Capacity. Over a cap it evicts, oldest first:
//
//  1. resolved messages (replayed, acknowledged), by the time they were
//     resolved;
//  2. pending messages, in arrival order, only with AllowEvictPending.
//
// Replaying messages are never evicted. Each batch is one transaction that
// also adjusts queue_summary and writes an audit row (action "evict"); each
// evicted message is counted in dlq_capacity_evicted_total and logged. When
// the store is over a cap and nothing may be evicted, the job logs an error
// and fails its run; the capacity alert rule (the fill level, which is then
// at or above 100%) fires on the next alert evaluation, as it does whenever
// evictions keep the store at its cap. Nothing is dropped silently.
type capacityJob struct {
	st           *store.Store
	metrics      *workMetrics
	cap          Capacity
	batchSize    int
	batchTimeout time.Duration
	pause        time.Duration
}

// ErrOverCapacity means the store is over a cap and the policy may not
// evict anything more.
var ErrOverCapacity = errors.New("over capacity and nothing may be evicted")

func (j *capacityJob) run(ctx context.Context, r *Run) (int64, error) {
	if !j.cap.enabled() {
		return 0, nil
	}
	var evicted int64
	for {
		totals, err := j.st.SummaryTotals(ctx)
		if err != nil {
			return evicted, err
		}
		overMsgs := int64(0)
		if j.cap.MaxMessages > 0 {
			overMsgs = totals.Messages - j.cap.MaxMessages
		}
		overBytes := int64(0)
		if j.cap.MaxBytes > 0 {
			overBytes = totals.Bytes - j.cap.MaxBytes
		}
		if overMsgs <= 0 && overBytes <= 0 {
			return evicted, nil
		}
		// Over the message cap only: evict exactly the excess. Over the
		// byte cap: whole batches, checking again after each.
		limit := j.batchSize
		if overBytes <= 0 {
			limit = int(min(int64(j.batchSize), overMsgs))
		}
		reason := map[string]any{
			"messages": totals.Messages, "bytes": totals.Bytes,
			"max_messages": j.cap.MaxMessages, "max_bytes": j.cap.MaxBytes,
		}
		res, err := j.evict(ctx, r, store.EvictResolved, limit, reason)
		if err == nil && res.Messages == 0 && j.cap.AllowEvictPending {
			res, err = j.evict(ctx, r, store.EvictPending, limit, reason)
		}
		evicted += res.Messages
		if err != nil {
			return evicted, err
		}
		if res.Messages == 0 {
			r.Logger.Error("store over capacity and nothing may be evicted; new dead messages are still stored",
				"messages", totals.Messages, "max_messages", j.cap.MaxMessages,
				"bytes", totals.Bytes, "max_bytes", j.cap.MaxBytes,
				"allow_evict_pending", j.cap.AllowEvictPending)
			return evicted, fmt.Errorf("%w: %d messages (max %d), %d bytes (max %d), allow_evict_pending=%t",
				ErrOverCapacity, totals.Messages, j.cap.MaxMessages, totals.Bytes, j.cap.MaxBytes, j.cap.AllowEvictPending)
		}
		if j.pause > 0 {
			t := time.NewTimer(j.pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return evicted, ctx.Err()
			case <-t.C:
			}
		}
	}
}

func (j *capacityJob) evict(ctx context.Context, r *Run, class string, limit int, reason map[string]any) (store.DeleteResult, error) {
	bctx, cancel := context.WithTimeout(ctx, j.batchTimeout)
	defer cancel()
	res, err := j.st.EvictOldest(bctx, r.Lease, class, limit, reason)
	if res.Messages > 0 {
		j.metrics.evicted.Add(float64(res.Messages))
		r.Logger.Warn("capacity policy evicted messages", "class", class, "evicted", res.Messages,
			"bytes", res.Bytes, "by_status", fmt.Sprint(res.ByStatus))
	}
	return res, err
}
