package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// StatusMove is a number of messages of one source queue and failure group
// moving from one status to another. From "" means inserted, To "" means
// deleted.
type StatusMove struct {
	Queue string
	// Group is the failure group id (dead_messages.group_id); 0 for none.
	Group    int64
	From, To string
	Messages int64
	Bytes    int64
}

// statusMovesSQL turns rows of (source_queue, group_id, from, to, count,
// bytes) into moves. Callers write statements that return exactly those
// columns, for example a CTE that UPDATEs and then GROUPs its RETURNING
// rows.
func statusMovesSQL(rows pgx.Rows) ([]StatusMove, error) {
	defer rows.Close()
	var out []StatusMove
	for rows.Next() {
		var (
			m     StatusMove
			group *int64
			from  *string
			to    *string
		)
		if err := rows.Scan(&m.Queue, &group, &from, &to, &m.Messages, &m.Bytes); err != nil {
			return nil, err
		}
		if group != nil {
			m.Group = *group
		}
		if from != nil {
			m.From = *from
		}
		if to != nil {
			m.To = *to
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

type activityKey struct {
	queue string
	hour  time.Time
}

type activityDelta struct{ new, returned, replayed, acknowledged, deleted int64 }

// applyStatusDeltas keeps the counters that describe dead_messages in step
// with a change made in tx: queue_summary (per queue and status),
// failure_groups (per group and status) and queue_activity (per queue and
// hour: replayed, acknowledged, deleted). Every statement that changes the
// status of rows, or deletes them, must call it in the same transaction
// with what it changed. Ingest does the same for its inserts with its own
// batch (see IngestBatch).
//
// It locks queue_summary, queue_activity and failure_groups rows, each in
// key order, after the caller's rows and tasks: the lock order of
// store/doc.go, the same in every writer so that concurrent transactions
// cannot deadlock.
func applyStatusDeltas(ctx context.Context, tx pgx.Tx, moves []StatusMove) error {
	if len(moves) == 0 {
		return nil
	}
	summary := make(map[summaryKey]summaryDelta)
	groups := make(map[int64]*groupChange)
	activity := make(map[activityKey]*activityDelta)
	hour := time.Now().UTC().Truncate(time.Hour)
	for _, m := range moves {
		if m.Messages == 0 || m.From == m.To {
			continue
		}
		if m.From != "" {
			k := summaryKey{m.Queue, m.From}
			d := summary[k]
			d.messages -= m.Messages
			d.bytes -= m.Bytes
			summary[k] = d
		}
		if m.To != "" {
			k := summaryKey{m.Queue, m.To}
			d := summary[k]
			d.messages += m.Messages
			d.bytes += m.Bytes
			summary[k] = d
		}
		groupMove(groups, m.Group, m.From, m.To, m.Messages)
		ak := activityKey{m.Queue, hour}
		a := activity[ak]
		if a == nil {
			a = &activityDelta{}
			activity[ak] = a
		}
		switch m.To {
		case StatusReplayed:
			a.replayed += m.Messages
		case StatusAcknowledged:
			a.acknowledged += m.Messages
		case "":
			a.deleted += m.Messages
		case StatusPending:
			if m.From == "" {
				a.new += m.Messages
			} else if m.From != StatusReplaying {
				a.returned += m.Messages
			}
		}
	}
	var b pgx.Batch
	queueSummaryDeltas(&b, summary)
	queueActivityDeltas(&b, activity)
	// Moves carry no group text: nothing to seal.
	if err := queueGroupChanges(&b, groups, nil); err != nil {
		return err
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("adjust summary, activity and group counters: %w", err)
	}
	return nil
}

// queueActivityDeltas adds the upsert of activity counters to b, in key
// order.
func queueActivityDeltas(b *pgx.Batch, deltas map[activityKey]*activityDelta) {
	keys := make([]activityKey, 0, len(deltas))
	for k, d := range deltas {
		if *d != (activityDelta{}) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.SortFunc(keys, func(a, b activityKey) int {
		return cmp.Or(cmp.Compare(a.queue, b.queue), a.hour.Compare(b.hour))
	})
	n := len(keys)
	queues, hours := make([]string, n), make([]time.Time, n)
	nw, ret, rep, ack, del := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, k := range keys {
		d := deltas[k]
		queues[i], hours[i] = k.queue, k.hour
		nw[i], ret[i], rep[i], ack[i], del[i] = d.new, d.returned, d.replayed, d.acknowledged, d.deleted
	}
	b.Queue(`
INSERT INTO queue_activity AS a (source_queue, hour, new, returned, replayed, acknowledged, deleted)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
ON CONFLICT (source_queue, hour) DO UPDATE SET
    new = a.new + EXCLUDED.new,
    returned = a.returned + EXCLUDED.returned,
    replayed = a.replayed + EXCLUDED.replayed,
    acknowledged = a.acknowledged + EXCLUDED.acknowledged,
    deleted = a.deleted + EXCLUDED.deleted`, queues, hours, nw, ret, rep, ack, del)
}

// ingestActivity counts an ingest batch's new and returned messages in the
// current hour of their source queues.
func ingestActivity(activity map[activityKey]*activityDelta, msgs []NewMessage, outcomes []Outcome) {
	hour := time.Now().UTC().Truncate(time.Hour)
	for i, o := range outcomes {
		if o != OutcomeInserted && o != OutcomeReturned {
			continue
		}
		k := activityKey{cleanText(msgs[i].SourceQueue), hour}
		a := activity[k]
		if a == nil {
			a = &activityDelta{}
			activity[k] = a
		}
		if o == OutcomeInserted {
			a.new++
		} else {
			a.returned++
		}
	}
}
