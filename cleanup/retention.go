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
	steps := c.resolvedSteps(lease, now)
	steps = append(steps, c.expirySteps(lease, now)...)
	steps = append(steps, c.ownExpirySteps(lease)...)
	var total int64
	var errs []error
	for _, step := range steps {
		n, err := c.batches(ctx, step.size, step.batch)
		total += n
		if n > 0 {
			step.logDone(log, n)
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

// retentionStep is one kind of work of DeleteExpired, done in batches of
// size (see batches); logDone logs what it did when it did something.
type retentionStep struct {
	size    int
	batch   func(ctx context.Context) (int64, error)
	logDone func(log *slog.Logger, n int64)
}

// resolvedSteps are the deletions of resolved messages resolved before
// their status's retention, one step per status not kept forever.
func (c *Cleaner) resolvedSteps(lease store.Lease, now time.Time) []retentionStep {
	var steps []retentionStep
	for _, status := range store.RetentionStatuses {
		ttl := c.cfg.Retention[status]
		if keptForever(ttl) {
			continue
		}
		cutoff := now.Add(-ttl)
		steps = append(steps, retentionStep{
			size: c.cfg.BatchSize,
			batch: func(ctx context.Context) (int64, error) {
				res, err := c.cfg.Store.DeleteResolvedBefore(ctx, lease, status, cutoff, c.cfg.BatchSize)
				c.metrics.deleted.WithLabelValues(status).Add(float64(res.Messages))
				return res.Messages, err
			},
			logDone: func(log *slog.Logger, n int64) {
				log.Info("retention deleted messages", "status", status, "deleted", n, "resolved_before", cutoff)
			},
		})
	}
	return steps
}

// expirySteps are the deletions of every Expiry's records past its TTL.
func (c *Cleaner) expirySteps(lease store.Lease, now time.Time) []retentionStep {
	var steps []retentionStep
	for _, e := range c.expiries {
		if keptForever(e.TTL) || e.Delete == nil {
			continue
		}
		cutoff := now.Add(-e.TTL)
		size := cmp.Or(e.BatchSize, c.cfg.BatchSize)
		steps = append(steps, retentionStep{
			size: size,
			batch: func(ctx context.Context) (int64, error) {
				return e.Delete(ctx, lease, cutoff, size)
			},
			logDone: func(log *slog.Logger, n int64) {
				log.Info("expired records deleted", "records", e.Name, "deleted", n, "older_than", cutoff)
			},
		})
	}
	return steps
}

// ownExpirySteps handle the records that carry their own expiry, so no
// TTL of the cleanup's: approval requests past theirs read as expired
// already (this writes it down, with an audit row each, and frees their
// snapshots); console sessions past theirs are refused already (this
// deletes them).
func (c *Cleaner) ownExpirySteps(lease store.Lease) []retentionStep {
	step := func(name string, batch func(ctx context.Context) (int64, error)) retentionStep {
		return retentionStep{size: c.cfg.BatchSize, batch: batch, logDone: func(log *slog.Logger, n int64) {
			log.Info("expired records handled", "records", name, "count", n)
		}}
	}
	return []retentionStep{
		step("approval requests", func(ctx context.Context) (int64, error) {
			return c.expireApprovals(ctx, lease)
		}),
		step("console sessions", func(ctx context.Context) (int64, error) {
			return c.cfg.Store.DeleteExpiredConsoleSessions(ctx, time.Now(), c.cfg.BatchSize)
		}),
	}
}

// expireApprovals writes down a batch of approval requests as expired,
// then drops their snapshots, a chunk per transaction (one request may
// have selected millions of messages) while the batch's time allows.
func (c *Cleaner) expireApprovals(ctx context.Context, lease store.Lease) (int64, error) {
	n, err := c.cfg.Store.ExpireApprovals(ctx, lease, c.cfg.BatchSize)
	if err != nil {
		return n, err
	}
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
