package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RepeatFailureReplays is the replay_count a pending message must exceed to
// count as a repeat failure. It is written as a literal in the queries below
// and in the partial index dead_messages_repeat_failures (migration 00005):
// the planner uses a partial index only for a predicate it can prove from
// the query text.
const RepeatFailureReplays = 2

// StatusCount is the number and total body size of messages.
type StatusCount struct {
	Messages int64 `json:"messages"`
	Bytes    int64 `json:"bytes"`
}

// QueueStatus is one source queue as the summary sees it.
type QueueStatus struct {
	SourceQueue string `json:"source_queue"`
	// ByStatus has an entry for every status the summary has a row for.
	ByStatus map[string]StatusCount `json:"by_status"`
	// Messages and Bytes are the totals over every status.
	Messages int64 `json:"messages"`
	Bytes    int64 `json:"bytes"`
	// OldestPendingAt is the failed_at of the oldest pending message, nil
	// when none is pending.
	OldestPendingAt *time.Time `json:"oldest_pending_at"`
	// UpdatedAt is the last change to any of the queue's summary rows.
	UpdatedAt time.Time `json:"updated_at"`
}

// StatusReport is the whole summary at one instant of the database clock.
type StatusReport struct {
	At     time.Time     `json:"at"`
	Queues []QueueStatus `json:"queues"`
}

// QueueStatus reads the per source queue counts from queue_summary, with
// each queue's oldest pending message (queueSummaryRows, oldestPendingSQL):
// one small table read and one index probe per queue, whatever the number
// of stored messages. scope, when not nil, restricts the report to those
// source queues.
func (s *Store) QueueStatus(ctx context.Context, scope []string) (StatusReport, error) {
	at, rows, err := s.queueSummaryRows(ctx, scope)
	if err != nil {
		return StatusReport{}, err
	}
	rep := StatusReport{At: at}
	for _, r := range rows {
		if n := len(rep.Queues); n == 0 || rep.Queues[n-1].SourceQueue != r.queue {
			rep.Queues = append(rep.Queues, QueueStatus{SourceQueue: r.queue, ByStatus: map[string]StatusCount{}})
		}
		q := &rep.Queues[len(rep.Queues)-1]
		q.ByStatus[r.status] = r.count
		q.Messages += r.count.Messages
		q.Bytes += r.count.Bytes
		if r.updated.After(q.UpdatedAt) {
			q.UpdatedAt = r.updated
		}
		if r.oldest != nil {
			q.OldestPendingAt = r.oldest
		}
	}
	return rep, nil
}

// SummaryTotals returns the number and body bytes of every stored message,
// from queue_summary.
func (s *Store) SummaryTotals(ctx context.Context) (StatusCount, error) {
	var c StatusCount
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(messages), 0)::bigint, coalesce(sum(bytes), 0)::bigint FROM queue_summary`).
		Scan(&c.Messages, &c.Bytes)
	if err != nil {
		return StatusCount{}, fmt.Errorf("store: read summary totals: %w", err)
	}
	return c, nil
}

// QueueAlertNumbers are the numbers alert rules look at for one source queue.
type QueueAlertNumbers struct {
	SourceQueue     string
	Pending         int64
	OldestPendingAt *time.Time
	// RepeatFailures counts pending messages with replay_count >
	// RepeatFailureReplays.
	RepeatFailures int64
	// NewLast5m counts pending messages whose failed_at (the time dlq
	// stored their last death) is within five minutes of At, up to the
	// limit AlertNumbers was given. Messages already resolved again within
	// those minutes are not counted.
	NewLast5m int64
	// AutoExhausted counts pending messages the automatic replay policies
	// parked (dead_messages_auto_exhausted).
	AutoExhausted int64
}

// AlertNumbers is what the alert job reads each evaluation.
type AlertNumbers struct {
	// At is the database clock, shared by every instance.
	At time.Time
	// Queues lists source queues with pending messages.
	Queues []QueueAlertNumbers
	// Totals are over every status, for the capacity rule.
	Totals StatusCount
}

// AlertNumbers reads the alert rules' inputs: for each source queue with
// pending messages, probes of the partial indexes on pending rows. The
// counts are proportional to the repeat failures and the parked messages,
// not to the table; the recent arrivals are counted up to newLimit a queue
// (0 counts none). Uncapped, that count is every row a flood stored in the
// last five minutes, read from the heap again at each evaluation: at a
// million stored during one drain, seconds of one PostgreSQL backend a
// minute, taken from ingest.
func (s *Store) AlertNumbers(ctx context.Context, newLimit int64) (AlertNumbers, error) {
	var out AlertNumbers
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return out, fmt.Errorf("store: read alert numbers: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	err = tx.QueryRow(ctx, `
SELECT now(), coalesce(sum(messages), 0)::bigint, coalesce(sum(bytes), 0)::bigint FROM queue_summary`).
		Scan(&out.At, &out.Totals.Messages, &out.Totals.Bytes)
	if err != nil {
		return out, fmt.Errorf("store: read alert numbers: totals: %w", err)
	}
	rows, err := tx.Query(ctx, `
SELECT s.source_queue, s.messages,
    `+oldestPendingSQL("s.source_queue")+`,
    (SELECT count(*) FROM dead_messages m
     WHERE m.source_queue = s.source_queue AND m.status = 'pending' AND m.replay_count > 2),
    (SELECT count(*) FROM (SELECT FROM dead_messages m
     WHERE m.source_queue = s.source_queue AND m.status = 'pending' AND m.failed_at > now() - interval '5 minutes'
     LIMIT $1) n),
    (SELECT count(*) FROM dead_messages m
     WHERE m.source_queue = s.source_queue AND m.auto_exhausted AND m.status = 'pending')
FROM queue_summary s
WHERE s.status = 'pending' AND s.messages > 0
ORDER BY s.source_queue`, max(newLimit, 0))
	if err != nil {
		return out, fmt.Errorf("store: read alert numbers: %w", err)
	}
	out.Queues, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueAlertNumbers, error) {
		var q QueueAlertNumbers
		err := r.Scan(&q.SourceQueue, &q.Pending, &q.OldestPendingAt, &q.RepeatFailures, &q.NewLast5m, &q.AutoExhausted)
		return q, err
	})
	if err != nil {
		return out, fmt.Errorf("store: read alert numbers: %w", err)
	}
	return out, nil
}

// SourceQueues lists every source queue that has stored messages or a
// summary row, in byte order (COLLATE "C"), and only those after the queue
// after when it is not nil. The summary job's pass saves the last queue it
// reconciled and continues after it on the next tick: the order and the
// comparison must be one rule, the same on every database. The database's
// own collation (en_US, say) sorts "orders-eu" before "Payments" where byte
// order (and Go's string comparison) puts it after, so a pass that stopped
// at "orders-eu" would skip "Payments".
//
// The stored queues are found with a loose index scan (one index probe per
// distinct queue) of the listing index on resting rows, and the replaying
// ones through the claim index, not by reading the table. The scan walks
// the index in its own (the database's) collation, which is only a way to
// find each queue once; the short list is then sorted. The resting statuses
// are written as the index's own predicate: without it no index leads with
// source_queue, and each probe was a sequential scan of the whole table (21
// of them for 20 queues).
func (s *Store) SourceQueues(ctx context.Context, after *string) ([]string, error) {
	resting, _ := restingStatuses(nil)
	rows, err := s.pool.Query(ctx, `
WITH RECURSIVE q(name) AS (
    (SELECT m.source_queue FROM dead_messages m WHERE `+statusIn("m", resting)+`
     ORDER BY m.source_queue LIMIT 1)
    UNION ALL
    SELECT (SELECT m.source_queue FROM dead_messages m
            WHERE m.source_queue > q.name AND `+statusIn("m", resting)+`
            ORDER BY m.source_queue LIMIT 1)
    FROM q WHERE q.name IS NOT NULL
)
SELECT name FROM (
    SELECT name FROM q WHERE name IS NOT NULL
    UNION
    SELECT m.source_queue FROM dead_messages m WHERE `+statusIn("m", []string{StatusReplaying})+`
    UNION
    SELECT source_queue FROM queue_summary
) u
WHERE $1::text IS NULL OR name COLLATE "C" > $1::text COLLATE "C"
ORDER BY name COLLATE "C"`, after)
	if err != nil {
		return nil, fmt.Errorf("store: list source queues: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: list source queues: %w", err)
	}
	return out, nil
}

// SummaryRepair is what reconciling one source queue found.
type SummaryRepair struct {
	SourceQueue string
	// Entries is the number of (queue, status) summary entries that were
	// wrong and were corrected.
	Entries int
	// Messages is the sum of the absolute message-count corrections.
	Messages int64
	// Deltas holds each correction (true minus summary), by status.
	Deltas map[string]StatusCount
	// Scanned is the number of dead_messages rows counted.
	Scanned int64
}

// ReconcileQueue recounts one source queue and repairs its summary rows.
//
// The count runs in one REPEATABLE READ snapshot that also reads the
// queue's summary rows. Every writer changes a message and the summary in
// one transaction, so within a snapshot the two agree unless something
// drifted; the difference is the drift. It is then applied as an increment,
// under the lease, in its own short transaction: increments commute with
// whatever writers committed since the snapshot, so nothing is locked while
// counting and nothing committed meanwhile is overwritten. The count walks
// each status in id order, chunk rows per statement, so no statement is
// long, only the snapshot.
func (s *Store) ReconcileQueue(ctx context.Context, l Lease, queue string, chunk int) (SummaryRepair, error) {
	rep := SummaryRepair{SourceQueue: queue}
	truth, summary, scanned, err := s.countQueue(ctx, queue, chunk)
	if err != nil {
		return rep, fmt.Errorf("store: reconcile summary of source queue %q: %w", queue, err)
	}
	rep.Scanned = scanned
	deltas := make(map[summaryKey]summaryDelta)
	for st := range statusUnion(truth, summary) {
		t, sm := truth[st], summary[st]
		if t == sm {
			continue
		}
		d := summaryDelta{messages: t.Messages - sm.Messages, bytes: t.Bytes - sm.Bytes}
		deltas[summaryKey{queue, st}] = d
		if rep.Deltas == nil {
			rep.Deltas = map[string]StatusCount{}
		}
		rep.Deltas[st] = StatusCount{Messages: d.messages, Bytes: d.bytes}
		rep.Entries++
		rep.Messages += max(d.messages, -d.messages)
	}
	if rep.Entries == 0 {
		return rep, nil
	}
	err = s.fenced(ctx, l, func(tx pgx.Tx) error {
		var b pgx.Batch
		queueSummaryDeltas(&b, deltas)
		b.Queue(`UPDATE summary_state SET repairs = repairs + $1`, rep.Entries)
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return rep, fmt.Errorf("store: repair summary of source queue %q: %w", queue, err)
	}
	return rep, nil
}

func statusUnion(a, b map[string]StatusCount) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// countQueue returns, from one snapshot, the true counts of queue by status
// and its summary rows.
func (s *Store) countQueue(ctx context.Context, queue string, chunk int) (truth, summary map[string]StatusCount, scanned int64, err error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	summary = map[string]StatusCount{}
	rows, err := tx.Query(ctx, `SELECT status, messages, bytes FROM queue_summary WHERE source_queue = $1`, queue)
	if err != nil {
		return nil, nil, 0, err
	}
	for rows.Next() {
		var st string
		var c StatusCount
		if err := rows.Scan(&st, &c.Messages, &c.Bytes); err != nil {
			rows.Close()
			return nil, nil, 0, err
		}
		if c != (StatusCount{}) {
			summary[st] = c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, 0, err
	}
	truth = map[string]StatusCount{}
	for _, st := range Statuses {
		var total StatusCount
		after := int64(0)
		for {
			var n, bytes, last int64
			// The status as a literal, so that the partial index
			// (source_queue, status, id) serves it (statusIn).
			err := tx.QueryRow(ctx, `
SELECT count(*), coalesce(sum(m.body_size), 0)::bigint, coalesce(max(m.id), 0)
FROM (SELECT m.id, m.body_size FROM dead_messages m
      WHERE m.source_queue = $1 AND `+statusIn("m", []string{st})+` AND m.id > $2
      ORDER BY m.id LIMIT $3) m`, queue, after, chunk).Scan(&n, &bytes, &last)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("count %s messages after id %d: %w", st, after, err)
			}
			total.Messages += n
			total.Bytes += bytes
			scanned += n
			if n < int64(chunk) {
				break
			}
			after = last
		}
		if total != (StatusCount{}) {
			truth[st] = total
		}
	}
	return truth, summary, scanned, nil
}

// SummaryState is the progress of the summary reconciliation.
type SummaryState struct {
	BootstrappedAt *time.Time `json:"bootstrapped_at"`
	PassStartedAt  *time.Time `json:"pass_started_at"`
	PassCursor     *string    `json:"pass_cursor"`
	LastPassAt     *time.Time `json:"last_pass_at"`
	Repairs        int64      `json:"repairs"`
	// Now is the database clock when the state was read.
	Now time.Time `json:"-"`
}

// ReadSummaryState returns the reconciliation's progress.
func (s *Store) ReadSummaryState(ctx context.Context) (SummaryState, error) {
	var st SummaryState
	err := s.pool.QueryRow(ctx, `
SELECT bootstrapped_at, pass_started_at, pass_cursor, last_pass_at, repairs, now() FROM summary_state`).
		Scan(&st.BootstrappedAt, &st.PassStartedAt, &st.PassCursor, &st.LastPassAt, &st.Repairs, &st.Now)
	if err != nil {
		return st, fmt.Errorf("store: read summary state: %w", err)
	}
	return st, nil
}

// SaveSummaryPass records the reconciliation's progress under l: the pass
// started at passStarted has done every queue up to cursor; done means the
// pass is complete (it then counts as the bootstrap if none happened yet).
// A nil passStarted clears the pass.
func (s *Store) SaveSummaryPass(ctx context.Context, l Lease, passStarted *time.Time, cursor *string, done bool) error {
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
UPDATE summary_state SET
    pass_started_at = CASE WHEN $3::boolean THEN NULL ELSE $1::timestamptz END,
    pass_cursor     = CASE WHEN $3::boolean THEN NULL ELSE $2::text END,
    last_pass_at    = CASE WHEN $3::boolean THEN now() ELSE last_pass_at END,
    bootstrapped_at = CASE WHEN $3::boolean THEN coalesce(bootstrapped_at, now()) ELSE bootstrapped_at END`,
			passStarted, cursor, done)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: save summary reconciliation progress: %w", err)
	}
	return nil
}

// ResetSummaryBootstrap marks the summary as not bootstrapped, so the next
// summary job run starts a full pass at once. Used when queue_summary is
// found empty while messages are stored (someone emptied it by hand).
func (s *Store) ResetSummaryBootstrap(ctx context.Context, l Lease) error {
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE summary_state SET bootstrapped_at = NULL, pass_started_at = NULL, pass_cursor = NULL`)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: reset summary bootstrap: %w", err)
	}
	return nil
}

// SummaryLooksEmpty reports whether queue_summary holds no counts while
// dead_messages has at least one row: the sign of a summary that was never
// built or was emptied. Both checks are single-row probes.
func (s *Store) SummaryLooksEmpty(ctx context.Context) (bool, error) {
	var empty bool
	err := s.pool.QueryRow(ctx, `
SELECT NOT EXISTS (SELECT 1 FROM queue_summary WHERE messages <> 0)
   AND EXISTS (SELECT 1 FROM dead_messages)`).Scan(&empty)
	if err != nil {
		return false, fmt.Errorf("store: check summary: %w", err)
	}
	return empty, nil
}
