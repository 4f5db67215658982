package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ArrivalHours is how many hours HourlyArrivals covers, the current one
// included.
const ArrivalHours = 24

// HourlyArrivals is each source queue's dead messages per hour over the
// last ArrivalHours hours: first deaths (new) and replayed messages that
// died again (returned).
type HourlyArrivals struct {
	// Since is the start of the first hour (UTC, whole hour); the last
	// counts the current hour so far.
	Since time.Time `json:"since"`
	// Queues holds, per source queue, one count per hour from Since on.
	// A queue with no arrival in the window is absent.
	Queues map[string][ArrivalHours]int64 `json:"queues"`
}

// Arrivals reads HourlyArrivals from the hourly counters (queue_activity),
// never from dead_messages: at most ArrivalHours rows per queue. scope,
// when not nil, restricts to those source queues.
func (s *Store) Arrivals(ctx context.Context, scope []string) (HourlyArrivals, error) {
	rows, err := s.pool.Query(ctx, `
WITH w AS (SELECT date_trunc('hour', now()) - interval '23 hours' AS since)
SELECT w.since, a.source_queue, a.hour, a.new + a.returned
FROM w LEFT JOIN queue_activity a
  ON a.hour >= w.since AND ($1::text[] IS NULL OR a.source_queue = ANY($1)) AND a.new + a.returned > 0`, scope)
	if err != nil {
		return HourlyArrivals{}, fmt.Errorf("store: read hourly arrivals: %w", err)
	}
	defer rows.Close()
	out := HourlyArrivals{Queues: map[string][ArrivalHours]int64{}}
	for rows.Next() {
		var (
			queue *string
			hour  *time.Time
			n     *int64
		)
		if err := rows.Scan(&out.Since, &queue, &hour, &n); err != nil {
			return HourlyArrivals{}, fmt.Errorf("store: read hourly arrivals: %w", err)
		}
		if queue == nil {
			continue
		}
		i := int(hour.Sub(out.Since) / time.Hour)
		if i < 0 || i >= ArrivalHours {
			continue
		}
		counts := out.Queues[*queue]
		counts[i] += *n
		out.Queues[*queue] = counts
	}
	if err := rows.Err(); err != nil {
		return HourlyArrivals{}, fmt.Errorf("store: read hourly arrivals: %w", err)
	}
	out.Since = out.Since.UTC()
	return out, nil
}

// QueueActivityKeep is how long the hourly counters (queue_activity) are
// kept: every read of them looks at the last 24 hours (stats, the
// console's arrivals), and the rest only slowed those reads down, each
// scanning every hour ever counted.
const QueueActivityKeep = 8 * 24 * time.Hour

// DeleteQueueActivityBefore deletes up to limit hourly counters of hours
// before cutoff, under l, and returns how many it deleted.
func (s *Store) DeleteQueueActivityBefore(ctx context.Context, l Lease, cutoff time.Time, limit int) (int64, error) {
	var n int64
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
DELETE FROM queue_activity WHERE ctid = ANY(ARRAY(SELECT ctid FROM queue_activity WHERE hour < $1 LIMIT $2))`, cutoff, limit)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: delete hourly counters before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return n, nil
}
