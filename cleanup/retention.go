package cleanup

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlq/dlq/store"
)

// DeleteExpired deletes what has outlived its retention: resolved messages
// (per status, adjusting queue_summary and auditing in the same
// transaction), then every Expiry. Deletion goes in batches, each its own
// short transaction with its own timeout, until a batch comes back short,
// so ingest never waits behind it for more than one batch; Pause between
// batches gives ingest more room still. Every batch is fenced by lease. It
// returns the rows deleted.
func (c *Cleaner) DeleteExpired(ctx context.Context, lease store.Lease, log *slog.Logger) (int64, error) {
	now := time.Now()
	var total int64
	var errs []error
	for _, status := range store.RetentionStatuses {
		ttl := c.cfg.Retention[status]
		if keptForever(ttl) {
			continue
		}
		cutoff := now.Add(-ttl)
		n, err := c.batches(ctx, c.cfg.BatchSize, func(ctx context.Context) (int64, error) {
			res, err := c.cfg.Store.DeleteResolvedBefore(ctx, lease, status, cutoff, c.cfg.BatchSize)
			c.metrics.deleted.WithLabelValues(status).Add(float64(res.Messages))
			return res.Messages, err
		})
		total += n
		if n > 0 {
			log.Info("retention deleted messages", "status", status, "deleted", n, "resolved_before", cutoff)
		}
		if err != nil {
			if stop(ctx, err) {
				return total, err
			}
			errs = append(errs, err)
		}
	}
	for _, e := range c.expiries {
		if keptForever(e.TTL) || e.Delete == nil {
			continue
		}
		cutoff := now.Add(-e.TTL)
		size := cmp.Or(e.BatchSize, c.cfg.BatchSize)
		n, err := c.batches(ctx, size, func(ctx context.Context) (int64, error) {
			return e.Delete(ctx, lease, cutoff, size)
		})
		total += n
		if n > 0 {
			log.Info("expired records deleted", "records", e.Name, "deleted", n, "older_than", cutoff)
		}
		if err != nil {
			if stop(ctx, err) {
				return total, err
			}
			errs = append(errs, err)
		}
	}
	// Records that carry their own expiry, so no TTL of the cleanup's:
	// approval requests past theirs read as expired already (this writes it
	// down, with an audit row each, and frees their snapshots); console
	// sessions past theirs are refused already (this deletes them).
	for _, own := range []struct {
		name string
		run  func(ctx context.Context) (int64, error)
	}{
		{"approval requests", func(ctx context.Context) (int64, error) {
			n, err := c.cfg.Store.ExpireApprovals(ctx, lease, c.cfg.BatchSize)
			if err != nil {
				return n, err
			}
			// Their snapshots, a chunk per transaction: one request may
			// have selected millions of messages.
			for {
				start := time.Now()
				d, err := c.cfg.Store.DropExpiredSnapshots(ctx, lease)
				if err != nil || d < store.ItemChunk {
					return n, err
				}
				if !store.RoomForAnother(ctx, time.Since(start)) {
					return n, nil // the next run goes on
				}
			}
		}},
		{"console sessions", func(ctx context.Context) (int64, error) {
			return c.cfg.Store.DeleteExpiredConsoleSessions(ctx, time.Now(), c.cfg.BatchSize)
		}},
	} {
		n, err := c.batches(ctx, c.cfg.BatchSize, own.run)
		total += n
		if n > 0 {
			log.Info("expired records handled", "records", own.name, "count", n)
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
// ends. Each call gets BatchTimeout; Pause waits between calls.
func (c *Cleaner) batches(ctx context.Context, size int, batch func(context.Context) (int64, error)) (int64, error) {
	var total int64
	for {
		bctx, cancel := context.WithTimeout(ctx, c.cfg.BatchTimeout)
		n, err := batch(bctx)
		cancel()
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(size) {
			return total, nil
		}
		if err := c.pause(ctx); err != nil {
			return total, err
		}
	}
}

// pause waits Pause between two batches, or returns ctx's error if it ends
// first.
func (c *Cleaner) pause(ctx context.Context) error {
	if c.cfg.Pause <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(c.cfg.Pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
