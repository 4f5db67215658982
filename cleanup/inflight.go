package cleanup

import (
	"context"
	"time"

	"github.com/dlq/dlq/store"
)

// Ingest is what the ingest_inflight expiry must know about this process's
// own ingest (a *consumer.Consumer).
type Ingest interface {
	// ConsumerTags names this process's consumers as ingest_inflight does.
	ConsumerTags() []string
	// WorkingSince is since when every consumer has been subscribed and
	// writing without interruption; zero while they are not.
	WorkingSince() time.Time
}

// inflightExpiry deletes ingest_inflight rows older than ttl that no
// delivery can come back for any more: rows of other processes'
// consumers, and only once this process's ingest has worked for ttl
// without interruption (the argument is in package store, "Stale ingest
// batches"). Without an Ingest it deletes nothing: a process that does not
// ingest cannot tell whether the returned deliveries were matched.
func inflightExpiry(st *store.Store, ing Ingest, ttl time.Duration, now func() time.Time) Expiry {
	return Expiry{
		Name: "ingest_inflight",
		TTL:  ttl,
		Delete: func(ctx context.Context, l store.Lease, before time.Time, limit int) (int64, error) {
			if ing == nil {
				return 0, nil
			}
			since := ing.WorkingSince()
			if since.IsZero() || now().Sub(since) < ttl {
				return 0, nil
			}
			return st.DeleteStaleInflight(ctx, l, before, ing.ConsumerTags(), limit)
		},
	}
}
