package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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

// ErrOverCapacity means the store is over a cap and the policy may not
// evict anything more.
var ErrOverCapacity = errors.New("over capacity and nothing may be evicted")

// EnforceCapacity is the capacity job's work: it keeps the store within
// Capacity. Over a cap it evicts, oldest first:
//
//  1. resolved messages (replayed, acknowledged), by the time they were
//     resolved;
//  2. pending messages, in arrival order, only with AllowEvictPending.
//
// Replaying messages are never evicted. Each batch is one transaction,
// fenced by lease, that also adjusts queue_summary and writes an audit row
// (action "evict"); each evicted message is counted in
// dlq_capacity_evicted_total and logged. When the store is over a cap and
// nothing may be evicted, it logs an error and returns ErrOverCapacity; the
// capacity alert rule (the fill level, which is then at or above 100%)
// fires on the next alert evaluation, as it does whenever evictions keep
// the store at its cap. Nothing is dropped silently. It returns the
// messages evicted.
func (c *Cleaner) EnforceCapacity(ctx context.Context, lease store.Lease, log *slog.Logger) (int64, error) {
	cp := c.cfg.Capacity
	if !cp.enabled() {
		return 0, nil
	}
	var evicted int64
	for {
		totals, err := c.cfg.Store.SummaryTotals(ctx)
		if err != nil {
			return evicted, err
		}
		overMsgs := int64(0)
		if cp.MaxMessages > 0 {
			overMsgs = totals.Messages - cp.MaxMessages
		}
		overBytes := int64(0)
		if cp.MaxBytes > 0 {
			overBytes = totals.Bytes - cp.MaxBytes
		}
		if overMsgs <= 0 && overBytes <= 0 {
			return evicted, nil
		}
		// Over the message cap only: evict exactly the excess. Over the
		// byte cap: whole batches, checking again after each.
		limit := c.cfg.BatchSize
		if overBytes <= 0 {
			limit = int(min(int64(c.cfg.BatchSize), overMsgs))
		}
		reason := map[string]any{
			"messages": totals.Messages, "bytes": totals.Bytes,
			"max_messages": cp.MaxMessages, "max_bytes": cp.MaxBytes,
		}
		res, err := c.evict(ctx, lease, log, store.EvictResolved, limit, reason)
		if err == nil && res.Messages == 0 && cp.AllowEvictPending {
			res, err = c.evict(ctx, lease, log, store.EvictPending, limit, reason)
		}
		evicted += res.Messages
		if err != nil {
			return evicted, err
		}
		if res.Messages == 0 {
			log.Error("store over capacity and nothing may be evicted; new dead messages are still stored",
				"messages", totals.Messages, "max_messages", cp.MaxMessages,
				"bytes", totals.Bytes, "max_bytes", cp.MaxBytes,
				"allow_evict_pending", cp.AllowEvictPending)
			return evicted, fmt.Errorf("%w: %d messages (max %d), %d bytes (max %d), allow_evict_pending=%t",
				ErrOverCapacity, totals.Messages, cp.MaxMessages, totals.Bytes, cp.MaxBytes, cp.AllowEvictPending)
		}
		if c.cfg.Pause > 0 {
			if err := c.pause(ctx); err != nil {
				return evicted, err
			}
		}
	}
}

func (c *Cleaner) evict(ctx context.Context, lease store.Lease, log *slog.Logger, class string, limit int, reason map[string]any) (store.DeleteResult, error) {
	bctx, cancel := context.WithTimeout(ctx, c.cfg.BatchTimeout)
	defer cancel()
	res, err := c.cfg.Store.EvictOldest(bctx, lease, class, limit, reason)
	if res.Messages > 0 {
		c.metrics.evicted.Add(float64(res.Messages))
		log.Warn("capacity policy evicted messages", "class", class, "evicted", res.Messages,
			"bytes", res.Bytes, "by_status", fmt.Sprint(res.ByStatus))
	}
	return res, err
}
