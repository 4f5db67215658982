package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeleteStaleInflight deletes, under l, up to limit ingest_inflight rows
// committed before cutoff whose consumer is not one of live (the consumer
// tags of the calling process, whose batches may still be waiting for
// their acknowledgement on an open channel). Their rows no longer absorb
// redeliveries. Only call it under the conditions in doc.go ("Stale
// ingest batches"): it is safe only once no delivery of those batches can
// still come back.
func (s *Store) DeleteStaleInflight(ctx context.Context, l Lease, cutoff time.Time, live []string, limit int) (int64, error) {
	if live == nil {
		live = []string{}
	}
	var n int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM ingest_inflight WHERE batch_id IN (
    SELECT batch_id FROM ingest_inflight
    WHERE committed_at < $1 AND consumer <> ALL($2::text[])
    ORDER BY committed_at LIMIT $3
    FOR UPDATE SKIP LOCKED)`, cutoff, live, limit)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: delete ingest batches committed before %s (keeping those of %d live consumers): %w",
			cutoff.Format(time.RFC3339), len(live), err)
	}
	return n, nil
}
