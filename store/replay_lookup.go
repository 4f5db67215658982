package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MessageReplay is one replay task that selected a message, with what
// became of the message in it.
type MessageReplay struct {
	TaskID int64
	// Outcome is the item's outcome (published, failed, unknown, skipped),
	// "" while the task has not settled it.
	Outcome string
	// Detail is the item's error or skip reason, when it has one.
	Detail string
}

// MessageReplaysScanMax is how many of the newest tasks MessageReplays
// looks through by default.
const MessageReplaysScanMax = 1000

// MessageReplays lists the replay tasks that selected message id, newest
// first, among the newest scan tasks created since since (the message's
// first failure: no older task can have selected it). complete is false
// when that many tasks were looked through, so older ones may be missing.
//
// replay_task_items has no index by message (a task writes up to millions
// of items, and one more index would slow every replay's snapshot): each
// task is probed through its primary key (task_id, message_id) instead,
// scan probes at most, from the newest task down; tasks are few, as they
// are deleted after replay.task_ttl.
func (s *Store) MessageReplays(ctx context.Context, id int64, since time.Time, scan int) (replays []MessageReplay, complete bool, err error) {
	if scan <= 0 {
		scan = MessageReplaysScanMax
	}
	rows, err := s.pool.Query(ctx, `
SELECT t.id, i.task_id IS NOT NULL, coalesce(i.outcome, ''), coalesce(i.detail, '')
FROM (SELECT t.id FROM replay_tasks t WHERE t.created_at >= $2 ORDER BY t.created_at DESC, t.id DESC LIMIT $3) t
LEFT JOIN replay_task_items i ON i.task_id = t.id AND i.message_id = $1
ORDER BY t.id DESC`, id, since, scan)
	if err != nil {
		return nil, false, fmt.Errorf("store: replays of message %d: %w", id, err)
	}
	var scanned int
	defer rows.Close()
	for rows.Next() {
		var (
			r    MessageReplay
			item bool
		)
		if err := rows.Scan(&r.TaskID, &item, &r.Outcome, &r.Detail); err != nil {
			return nil, false, fmt.Errorf("store: replays of message %d: %w", id, err)
		}
		scanned++
		if item {
			replays = append(replays, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("store: replays of message %d: %w", id, err)
	}
	return replays, scanned < scan, nil
}

// LatestGroupReplay returns the id of the newest replay task that
// selected failure group group by its filter (the console's and the API's
// group replay), among the newest scan tasks; ok is false when none did.
// A task records its request as asked (replay_tasks.request), so the
// group is read from there: tasks are few (deleted after
// replay.task_ttl), and no index is needed.
func (s *Store) LatestGroupReplay(ctx context.Context, group string, scan int) (id int64, ok bool, err error) {
	if scan <= 0 {
		scan = MessageReplaysScanMax
	}
	err = s.pool.QueryRow(ctx, `
SELECT t.id FROM (SELECT id, request FROM replay_tasks ORDER BY id DESC LIMIT $2) t
WHERE t.request->'filter'->>'group' = $1
ORDER BY t.id DESC LIMIT 1`, group, scan).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("store: the latest replay of group %s: %w", group, err)
	}
	return id, true, nil
}
