package store_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// dueSeed fills a schema for the policies' due query: the failure groups
// 1 (orders, transient: the policy's), 2 (orders, permanent), 3 (billing,
// transient) and 4 (orders, transient, another failure type), their
// messages, and the attempt counts of policy orders-timeouts (first delay
// 1h, jitter 0.2: no attempt is due sooner than 48 minutes after the
// message died). Group 1 holds 20,000 pending messages, 51 of them due:
// 12,000 that died in the last 40 minutes, 3,000 that died again in that
// time after their first attempt, 200 that died again 50 to 70 minutes
// ago (their second attempt is due 96 minutes after at the soonest), 10
// tried max_attempts times (parked at the next run), 4,700 parked two
// days ago, the due ones (40 never tried, 10 tried once, 3 to 4 hours
// ago), three at the walk's bound (ids of the test's choosing, below),
// and 2,000 replayed messages with their attempt counts. Groups 2 and 3
// hold 5,000 and 1,000 old pending messages, group 4 5,000 pending
// messages that are all due. The kinds interleave in the id order, as
// messages that die at once do.
//
// At the bound: 1000012 and 1001012 have jitter 0 (the first attempt is
// due 48 minutes after the death): 1000012 died 51 minutes ago and is
// due, 1001012 45 minutes ago and is not; 1000901 has jitter 0.991 (due
// after 71.8 minutes) and died 68 minutes ago: not due.
const dueSeed = `
INSERT INTO failure_groups (id, source_queue, reason, failure_type, category, pending, first_seen, last_seen) VALUES
    (1, 'orders', 'rejected', 'TimeoutException', 'transient', 20000, now(), now()),
    (2, 'orders', 'rejected', 'JsonException', 'permanent', 5000, now(), now()),
    (3, 'billing', 'rejected', 'TimeoutException', 'transient', 1000, now(), now()),
    (4, 'orders', 'rejected', 'SocketException', 'transient', 5000, now(), now());
CREATE TABLE due_seed (kind text, n int, grp bigint, died_from interval, died_to interval, exhausted boolean,
    status text, attempts int, tried interval);
INSERT INTO due_seed VALUES
    ('just died', 12000, 1, '0', '40 minutes', false, 'pending', NULL, NULL),
    ('died again just now', 3000, 1, '1 minute', '40 minutes', false, 'pending', 1, '45 minutes'),
    ('died again a while ago', 200, 1, '50 minutes', '70 minutes', false, 'pending', 1, '75 minutes'),
    ('tried max_attempts times', 10, 1, '4 hours', '4 hours', false, 'pending', 3, '5 hours'),
    ('parked', 4700, 1, '2 days', '2 days', true, 'pending', NULL, NULL),
    ('due, never tried', 40, 1, '3 hours', '3 hours 10 minutes', false, 'pending', NULL, NULL),
    ('due, tried once', 10, 1, '4 hours', '4 hours 10 minutes', false, 'pending', 1, '5 hours'),
    ('replayed', 2000, 1, '3 hours', '3 hours', false, 'replayed', 1, '3 hours'),
    ('permanent', 5000, 2, '2 days', '2 days', false, 'pending', NULL, NULL),
    ('another queue', 1000, 3, '2 days', '2 days', false, 'pending', NULL, NULL),
    ('all due', 5000, 4, '1 day', '1 day 10 minutes', false, 'pending', NULL, NULL);
CREATE TABLE due_seeded AS
SELECT s.*, row_number() OVER (ORDER BY g::float8 / s.n, s.kind) AS k, g
FROM due_seed s, generate_series(1, s.n) g;
INSERT INTO dead_messages (source_queue, dead_letter_queue, reason, properties, headers, body, body_size,
    first_failed_at, failed_at, fingerprint, group_id, status, category, auto_exhausted)
SELECT CASE WHEN grp = 3 THEN 'billing' ELSE 'orders' END, 'dlq', 'rejected', '{}', '{}', '\x00', 1,
    now() - interval '5 days', now() - died_from - (died_to - died_from) * ((g % 100) / 99.0),
    k, grp, status, CASE WHEN grp = 2 THEN 'permanent' ELSE 'transient' END, exhausted
FROM due_seeded ORDER BY k;
INSERT INTO dead_messages (id, source_queue, dead_letter_queue, reason, properties, headers, body, body_size,
    first_failed_at, failed_at, fingerprint, group_id, status, category)
SELECT id, 'orders', 'dlq', 'rejected', '{}', '{}', '\x00', 1, now() - died, now() - died, id, 1, 'pending', 'transient'
FROM (VALUES (1000012, interval '51 minutes'), (1001012, interval '45 minutes'), (1000901, interval '68 minutes')) v(id, died);
INSERT INTO policy_attempts (policy, message_id, attempts, last_task_id, last_attempt_at)
SELECT 'orders-timeouts', m.id, s.attempts, 1, now() - s.tried
FROM dead_messages m JOIN due_seeded s ON s.k = m.fingerprint AND s.grp = m.group_id
WHERE s.attempts IS NOT NULL;
ANALYZE dead_messages;
ANALYZE policy_attempts;
ANALYZE failure_groups;
`

// TestPolicyDueReadsWhatItTakes: the policies' due query reads the
// messages it takes and the few beside them that died before the last of
// those, not every pending message of the group: neither the ones that
// just died nor the parked ones. What it finds is what the schedule says
// is due, to the message, those that died longest ago first.
func TestPolicyDueReadsWhatItTakes(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	for _, id := range []int64{1000012, 1001012} {
		require.Zero(t, store.PolicyJitter(id, 1), "id %d", id)
	}
	require.Equal(t, 0.991, store.PolicyJitter(1000901, 1))
	_, err := db.Exec(ctx, dueSeed)
	require.NoError(t, err)

	sel := store.PolicySelection{Name: "orders-timeouts", Queues: []string{"orders"}, Categories: []string{"transient"},
		Reasons: []string{"rejected"}, FirstDelay: time.Hour, BackoffFactor: 2, MaxDelay: 8 * time.Hour, Jitter: 0.2, MaxAttempts: 3}
	one := sel
	one.Groups = []int64{1}
	due := dueBySchedule(t, db, one)
	require.Len(t, due, 40+10+1)
	require.Contains(t, due, int64(1000012))

	// Group 1 alone: every due message, and besides them the 200 in
	// backoff and the 10 tried max_attempts times that died before the
	// bound, and the one at the jitter's far end.
	read, got := explainDue(t, db, one, 1000)
	t.Logf("group 1: %d rows of dead_messages read, %d due", read, len(got))
	require.ElementsMatch(t, due, got)
	require.LessOrEqual(t, read, int64(len(due)+200+10+1+20), "rows of dead_messages read for %d due messages of 20,000", len(due))

	// The same through PreviewPolicy, and a smaller attempt takes those
	// that died longest ago.
	pv, err := st.PreviewPolicy(ctx, one, 1000, 1000)
	require.NoError(t, err)
	require.Equal(t, int64(len(due)), pv.Due)
	require.Equal(t, sorted(due), pv.Sample)
	pv, err = st.PreviewPolicy(ctx, one, 20, 20)
	require.NoError(t, err)
	require.Equal(t, sorted(longestDead(t, db, due, 20)), pv.Sample)

	// Every group the policy selects (1 and 4, whose 5,000 are all due):
	// an attempt of 100 reads about 100 of group 4's, not all of them.
	read, got = explainDue(t, db, sel, 100)
	t.Logf("groups 1 and 4, an attempt of 100: %d rows of dead_messages read", read)
	require.LessOrEqual(t, read, int64(len(due)+200+10+1+20+100+20), "rows of dead_messages read for an attempt of 100")
	rows, err := db.Query(ctx, `SELECT id FROM dead_messages WHERE group_id = 4 ORDER BY failed_at, id LIMIT 100`)
	require.NoError(t, err)
	oldest, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, sorted(oldest), sorted(got), "group 4's messages died before group 1's")

	// The attempt itself: its task holds what was due, counted by attempt.
	run, ok, err := st.BeginJobRun(ctx, "policies", "test", time.Now().UTC().Truncate(time.Millisecond), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	res, err := st.StartPolicyAttempt(ctx, run.Lease, store.PolicyAttempt{Selection: one, Limit: 1000,
		Request: json.RawMessage(`{"on_unknown":"hold"}`)})
	require.NoError(t, err)
	require.NotNil(t, res.Task)
	require.Equal(t, map[int]int64{1: 41, 2: 10}, res.Attempts)
	rows, err = db.Query(ctx, `SELECT message_id FROM replay_task_items WHERE task_id = $1 ORDER BY message_id`, res.Task.ID)
	require.NoError(t, err)
	items, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, sorted(due), items)
}

// dueBySchedule reads every pending message of the groups sel names and
// returns those whose next attempt is due now by the schedule, computed
// here (store.PolicyJitter) from the rows and their attempt counts.
func dueBySchedule(t *testing.T, db *pgxpool.Pool, sel store.PolicySelection) []int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), `
SELECT m.id, m.failed_at, coalesce(a.attempts, 0), a.last_attempt_at, now()
FROM dead_messages m LEFT JOIN policy_attempts a ON a.policy = $1 AND a.message_id = m.id
WHERE m.group_id = ANY($2) AND m.status = 'pending' AND NOT m.auto_exhausted`, sel.Name, sel.Groups)
	require.NoError(t, err)
	var due []int64
	for rows.Next() {
		var (
			id       int64
			failed   time.Time
			attempts int
			last     *time.Time
			now      time.Time
		)
		require.NoError(t, rows.Scan(&id, &failed, &attempts, &last, &now))
		if attempts >= sel.MaxAttempts {
			continue
		}
		from := failed
		if last != nil && last.After(from) {
			from = *last
		}
		d := min(sel.FirstDelay.Seconds()*math.Pow(sel.BackoffFactor, float64(attempts)), sel.MaxDelay.Seconds())
		d *= 1 + sel.Jitter*(2*store.PolicyJitter(id, attempts+1)-1)
		if !from.Add(time.Duration(d * float64(time.Second))).After(now) {
			due = append(due, id)
		}
	}
	require.NoError(t, rows.Err())
	return due
}

// explainDue runs the due query of sel for an attempt of limit messages
// under EXPLAIN ANALYZE and returns the rows of dead_messages its scans
// read (those they returned and those their conditions removed, in every
// loop) and the ids it found.
func explainDue(t *testing.T, db *pgxpool.Pool, sel store.PolicySelection, limit int64) (int64, []int64) {
	t.Helper()
	ctx := context.Background()
	sql, args := sel.DueSQL(limit)
	rows, err := db.Query(ctx, sql, args...)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		var id int64
		var attempts int
		err := r.Scan(&id, &attempts)
		return id, err
	})
	require.NoError(t, err)
	var out []byte
	require.NoError(t, db.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql, args...).Scan(&out))
	var plan []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(out, &plan))
	return plan[0].Plan.deadMessagesRead(), got
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON)'s plan.
type planNode struct {
	Relation  string     `json:"Relation Name"`
	Rows      float64    `json:"Actual Rows"`
	Loops     float64    `json:"Actual Loops"`
	Filtered  float64    `json:"Rows Removed by Filter"`
	Rechecked float64    `json:"Rows Removed by Index Recheck"`
	Plans     []planNode `json:"Plans"`
}

// deadMessagesRead sums, over the scans of dead_messages in the plan, the
// rows each read: those it returned and those it removed, in every loop.
func (n planNode) deadMessagesRead() int64 {
	var read float64
	if n.Relation == "dead_messages" {
		read += (n.Rows + n.Filtered + n.Rechecked) * n.Loops
	}
	for _, c := range n.Plans {
		read += float64(c.deadMessagesRead())
	}
	return int64(read)
}

// longestDead returns the n of ids that died longest ago (then the lowest
// ids first).
func longestDead(t *testing.T, db *pgxpool.Pool, ids []int64, n int) []int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT id FROM dead_messages WHERE id = ANY($1) ORDER BY failed_at, id LIMIT $2`, ids, n)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return out
}

func sorted(ids []int64) []int64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
