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

// GroupReplayScanMax is how many of a failure group's newest messages of
// each status GroupReplays reads by default.
const GroupReplayScanMax = 500

// GroupReplays is what a failure group's messages say of their replays,
// read from at most scan of its newest messages of each status.
type GroupReplays struct {
	// LastTaskID is the newest replay task that claimed one of the
	// messages read (a row keeps the task that claimed it last), whatever
	// the task selected: the group, its queue, ids or an approval's
	// snapshot. 0: none did.
	LastTaskID int64
	// FailedAgain counts the pending messages read that were replayed
	// before (replay_count > 0): they died again after a replay. The last
	// of them died at FailedAgainAt, after task FailedAgainTask (0: not
	// known) had claimed it.
	FailedAgain     int64
	FailedAgainAt   time.Time
	FailedAgainTask int64
	// Partial: a status had more messages than were read, so older ones
	// may name a newer task, and FailedAgain may count fewer than there are.
	Partial bool
}

// GroupReplays reads the replays of failure group group (of source queue
// queue) off its messages: at most scan of its newest pending, replayed
// and acknowledged messages each, through dead_messages_group_status_id,
// and the newest scan of the queue's pending messages that were replayed
// before, through dead_messages_repeat (a message that died again keeps
// its id, so it may be older than the group's newest). Each branch is an
// index scan stopped by its LIMIT: a page view reads at most 4 × scan rows
// however large the group, and dead_messages needs no index for it.
//
// Each branch names its group (or queue) as "= ANY" of a one-element
// array and orders by it before id. With a plain "=", the ORDER BY is id
// alone, which the primary key serves too: for a large group the planner
// walked the primary key backwards, filtering, and read every newer
// message of other groups first (250,000 rows, 170 ms, for a group of
// 300,000 older than another of 200,000; the whole table, 320 ms, for a
// status the group had none of). Only the group's index returns rows in
// (group, id) order, so it is the one that stops at the LIMIT. The status
// of the repeat branch is an array for the same reason: the queue's
// (source_queue, status, id) index cannot order by it. Statuses are
// literals, as the partial indexes require
// (migrations/00061_resting_indexes.sql); planned with the values
// (planEachTime), so that a plan made while the table was small does not
// outlive it. TestGroupReplaysBoundedByIndexes holds the plan.
func (s *Store) GroupReplays(ctx context.Context, group, queue string, scan int) (GroupReplays, error) {
	gid, err := ParseGroupID(group)
	if err != nil {
		return GroupReplays{}, err
	}
	if scan <= 0 {
		scan = GroupReplayScanMax
	}
	var (
		r                   GroupReplays
		at                  *time.Time
		lastTask, againTask *int64
		read                [4]int64
	)
	err = s.pool.QueryRow(ctx, groupReplaysSQL, planEachTime, []int64{gid}, []string{queue}, scan).
		Scan(&lastTask, &r.FailedAgain, &at, &againTask, &read[0], &read[1], &read[2], &read[3])
	if err != nil {
		return GroupReplays{}, fmt.Errorf("store: the replays of group %s: %w", group, err)
	}
	if lastTask != nil {
		r.LastTaskID = *lastTask
	}
	if at != nil {
		r.FailedAgainAt = at.UTC()
	}
	if againTask != nil {
		r.FailedAgainTask = *againTask
	}
	for _, n := range read {
		r.Partial = r.Partial || n == int64(scan)
	}
	return r, nil
}

// groupReplaysSQL reads a group's replays off its rows ($1 the group, $2
// its queue, $3 the rows read per status): GroupReplays.
const groupReplaysSQL = `
WITH seen AS (
    (SELECT 0 AS branch, TRUE AS mine, m.id, m.replay_count, m.replay_task_id, m.failed_at FROM dead_messages m
     WHERE m.group_id = ANY($1::bigint[]) AND m.status = 'pending' ORDER BY m.group_id DESC, m.id DESC LIMIT $3)
    UNION ALL
    (SELECT 1, TRUE, m.id, m.replay_count, m.replay_task_id, m.failed_at FROM dead_messages m
     WHERE m.group_id = ANY($1::bigint[]) AND m.status = 'replayed' ORDER BY m.group_id DESC, m.id DESC LIMIT $3)
    UNION ALL
    (SELECT 2, TRUE, m.id, m.replay_count, m.replay_task_id, m.failed_at FROM dead_messages m
     WHERE m.group_id = ANY($1::bigint[]) AND m.status = 'acknowledged' ORDER BY m.group_id DESC, m.id DESC LIMIT $3)
    UNION ALL
    (SELECT 3, m.group_id = ANY($1::bigint[]), m.id, m.replay_count, m.replay_task_id, m.failed_at FROM dead_messages m
     WHERE m.source_queue = ANY($2::text[]) AND m.replay_count > 0 AND m.status = ANY('{pending}'::text[])
     ORDER BY m.source_queue DESC, m.id DESC LIMIT $3)
), again AS (
    SELECT failed_at, replay_task_id FROM seen
    WHERE mine AND branch IN (0, 3) AND replay_count > 0 ORDER BY failed_at DESC, id DESC LIMIT 1
)
SELECT max(replay_task_id) FILTER (WHERE mine),
    count(DISTINCT id) FILTER (WHERE mine AND branch IN (0, 3) AND replay_count > 0),
    (SELECT failed_at FROM again), (SELECT replay_task_id FROM again),
    count(*) FILTER (WHERE branch = 0), count(*) FILTER (WHERE branch = 1),
    count(*) FILTER (WHERE branch = 2), count(*) FILTER (WHERE branch = 3)
FROM seen`
