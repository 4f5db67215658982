package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stats is the overview behind GET /api/v1/stats.
type Stats struct {
	At       time.Time `json:"at"`
	ByStatus Counts    `json:"by_status"`
	// Bytes is the total body size over every status.
	Bytes         int64             `json:"bytes"`
	BySourceQueue []QueueStats      `json:"by_source_queue"`
	ByReason      map[string]Counts `json:"by_reason"`
	// ByCategory counts by failure category (every category present).
	ByCategory    map[string]Counts  `json:"by_category"`
	OldestPending *OldestPendingStat `json:"oldest_pending"`
	TopGroups     []Group            `json:"top_groups"`
	// RepeatFailures counts pending messages that were replayed before
	// and died again (replay_count > 0).
	RepeatFailures int64    `json:"repeat_failures"`
	Last24h        Activity `json:"last_24h"`
	// Categorisation is the progress of recomputing stored categories
	// after a change of the rules.
	Categorisation *CategoryState `json:"categorisation"`
}

// QueueStats is one source queue's counts.
type QueueStats struct {
	SourceQueue string `json:"source_queue"`
	Counts      Counts `json:"counts"`
	Bytes       int64  `json:"bytes"`
	// OldestPendingAt is the failed_at of the oldest pending message (nil
	// when none is pending), and OldestPendingAgeSeconds its age (0).
	OldestPendingAt         *time.Time `json:"oldest_pending_at"`
	OldestPendingAgeSeconds float64    `json:"oldest_pending_age_seconds"`
	RepeatFailures          int64      `json:"repeat_failures"`
	// UpdatedAt is the last change to the queue's counters.
	UpdatedAt time.Time `json:"updated_at"`
}

// QueueSummary reads per source queue counts from queue_summary, with
// each queue's oldest pending message (queueSummaryRows, oldestPendingSQL):
// the cost depends on the number of queues only. scope, when not nil,
// restricts to those queues. at is the database clock.
func (s *Store) QueueSummary(ctx context.Context, scope []string) (at time.Time, queues []QueueStats, err error) {
	at, rows, err := s.queueSummaryRows(ctx, scope)
	if err != nil {
		return at, nil, err
	}
	queues = []QueueStats{}
	for _, r := range rows {
		if k := len(queues); k == 0 || queues[k-1].SourceQueue != r.queue {
			queues = append(queues, QueueStats{SourceQueue: r.queue})
		}
		q := &queues[len(queues)-1]
		q.Counts.add(r.status, r.count.Messages)
		q.Bytes += r.count.Bytes
		if r.updated.After(q.UpdatedAt) {
			q.UpdatedAt = r.updated.UTC()
		}
		if r.oldest != nil {
			t := r.oldest.UTC()
			q.OldestPendingAt = &t
			q.OldestPendingAgeSeconds = max(0, at.Sub(t).Seconds())
		}
	}
	return at, queues, nil
}

// OldestPendingStat is the oldest pending message over every queue in
// scope.
type OldestPendingStat struct {
	SourceQueue string    `json:"source_queue"`
	FailedAt    time.Time `json:"failed_at"`
	AgeSeconds  float64   `json:"age_seconds"`
}

// Activity counts what happened in a time window.
type Activity struct {
	// Since is the start of the window (whole hours: the counters are
	// hourly, so the window is between 23 and 24 hours long).
	Since        time.Time `json:"since"`
	New          int64     `json:"new"`
	Returned     int64     `json:"returned"`
	Replayed     int64     `json:"replayed"`
	Acknowledged int64     `json:"acknowledged"`
	Deleted      int64     `json:"deleted"`
}

// TopGroupsLimit is how many failure groups Stats shows.
const TopGroupsLimit = 10

// Stats reads the overview from the counter tables (queue_summary,
// failure_groups, queue_activity) and from index probes per queue, never
// from a scan of dead_messages: its cost depends on the number of queues
// and groups, not messages. scope, when not nil, restricts every number to
// those source queues.
func (s *Store) Stats(ctx context.Context, scope []string) (Stats, error) {
	st := Stats{ByReason: map[string]Counts{}, ByCategory: map[string]Counts{}}
	for _, c := range Categories {
		st.ByCategory[c] = Counts{}
	}
	var err error
	st.At, st.BySourceQueue, err = s.QueueSummary(ctx, scope)
	if err != nil {
		return Stats{}, err
	}
	for _, q := range st.BySourceQueue {
		st.ByStatus.add(StatusPending, q.Counts.Pending)
		st.ByStatus.add(StatusReplaying, q.Counts.Replaying)
		st.ByStatus.add(StatusReplayed, q.Counts.Replayed)
		st.ByStatus.add(StatusAcknowledged, q.Counts.Acknowledged)
		st.Bytes += q.Bytes
		if q.OldestPendingAt != nil && (st.OldestPending == nil || q.OldestPendingAt.Before(st.OldestPending.FailedAt)) {
			st.OldestPending = &OldestPendingStat{SourceQueue: q.SourceQueue, FailedAt: *q.OldestPendingAt, AgeSeconds: q.OldestPendingAgeSeconds}
		}
	}
	if err := s.statsRepeatFailures(ctx, &st, scope); err != nil {
		return Stats{}, err
	}
	if err := s.statsByReason(ctx, &st, scope); err != nil {
		return Stats{}, err
	}
	if st.TopGroups, err = s.Groups(ctx, GroupQuery{Limit: TopGroupsLimit, Scope: scope}); err != nil {
		return Stats{}, err
	}
	if err := s.statsLast24h(ctx, &st, scope); err != nil {
		return Stats{}, err
	}
	cs, err := s.ReadCategoryState(ctx)
	if err != nil {
		return Stats{}, err
	}
	st.Categorisation = &cs
	return st, nil
}

// statsRepeatFailures counts the repeat failures, in all and per queue
// of st.BySourceQueue: one probe of the partial index
// dead_messages_repeat per queue (its predicate is written out so the
// planner can use it).
func (s *Store) statsRepeatFailures(ctx context.Context, st *Stats, scope []string) error {
	rows, err := s.pool.Query(ctx, `
SELECT m.source_queue, count(*) FROM dead_messages m
WHERE m.replay_count > 0 AND m.status = 'pending' AND ($1::text[] IS NULL OR m.source_queue = ANY($1))
GROUP BY 1`, scope)
	if err != nil {
		return fmt.Errorf("store: stats: repeat failures: %w", err)
	}
	repeat := map[string]int64{}
	for rows.Next() {
		var (
			q string
			n int64
		)
		if err := rows.Scan(&q, &n); err != nil {
			rows.Close()
			return fmt.Errorf("store: stats: repeat failures: %w", err)
		}
		repeat[q] = n
		st.RepeatFailures += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: stats: repeat failures: %w", err)
	}
	for i := range st.BySourceQueue {
		st.BySourceQueue[i].RepeatFailures = repeat[st.BySourceQueue[i].SourceQueue]
	}
	return nil
}

// statsByReason adds the failure groups' counts to st.ByReason and
// st.ByCategory.
func (s *Store) statsByReason(ctx context.Context, st *Stats, scope []string) error {
	rows, err := s.pool.Query(ctx, `
SELECT g.reason, g.category, sum(g.pending)::bigint, sum(g.replaying)::bigint, sum(g.replayed)::bigint, sum(g.acknowledged)::bigint
FROM failure_groups g
WHERE $1::text[] IS NULL OR g.source_queue = ANY($1)
GROUP BY 1, 2`, scope)
	if err != nil {
		return fmt.Errorf("store: stats: by reason: %w", err)
	}
	for rows.Next() {
		var (
			reason, cat string
			c           Counts
		)
		if err := rows.Scan(&reason, &cat, &c.Pending, &c.Replaying, &c.Replayed, &c.Acknowledged); err != nil {
			rows.Close()
			return fmt.Errorf("store: stats: by reason: %w", err)
		}
		if c != (Counts{}) {
			st.ByReason[reason] = st.ByReason[reason].plus(c)
			st.ByCategory[cat] = st.ByCategory[cat].plus(c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: stats: by reason: %w", err)
	}
	return nil
}

// statsLast24h reads st.Last24h: the activity since the start of the hour
// 23 hours before st.At.
func (s *Store) statsLast24h(ctx context.Context, st *Stats, scope []string) error {
	since := st.At.UTC().Truncate(time.Hour).Add(-23 * time.Hour)
	st.Last24h.Since = since
	err := s.pool.QueryRow(ctx, `
SELECT coalesce(sum(new), 0)::bigint, coalesce(sum(returned), 0)::bigint, coalesce(sum(replayed), 0)::bigint,
       coalesce(sum(acknowledged), 0)::bigint, coalesce(sum(deleted), 0)::bigint
FROM queue_activity
WHERE hour >= $1 AND ($2::text[] IS NULL OR source_queue = ANY($2))`, since, scope).
		Scan(&st.Last24h.New, &st.Last24h.Returned, &st.Last24h.Replayed, &st.Last24h.Acknowledged, &st.Last24h.Deleted)
	if err != nil {
		return fmt.Errorf("store: stats: last 24 hours: %w", err)
	}
	return nil
}

// CategoryCount is the number of pending messages of one source queue and
// failure category.
type CategoryCount struct {
	SourceQueue string
	Category    string
	Pending     int64
}

// PendingByCategory counts pending messages per source queue and failure
// category from the failure groups: O(groups), whatever the number of
// messages. Every pair that has a group is listed, with 0 when nothing of
// it is pending, so a series drops to 0 rather than vanishing.
func (s *Store) PendingByCategory(ctx context.Context) ([]CategoryCount, error) {
	rows, err := s.pool.Query(ctx, `
SELECT g.source_queue, g.category, sum(g.pending)::bigint FROM failure_groups g GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("store: count pending messages by category: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CategoryCount, error) {
		var c CategoryCount
		err := r.Scan(&c.SourceQueue, &c.Category, &c.Pending)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: count pending messages by category: %w", err)
	}
	return out, nil
}
