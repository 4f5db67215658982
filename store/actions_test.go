package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// seed ingests n messages per queue and returns their ids in order.
func seed(t *testing.T, st *store.Store, db *pgxpool.Pool, queues []string, n int, failure func(q string, i int) (string, string)) []int64 {
	t.Helper()
	ctx := context.Background()
	var msgs []store.NewMessage
	now := time.Now().UTC()
	for _, q := range queues {
		for i := range n {
			ft, fm := failure(q, i)
			msgs = append(msgs, store.NewMessage{
				MessageID: fmt.Sprintf("%s-%d", q, i), SourceQueue: q, SourceExchange: "ex", SourceRoutingKey: q,
				DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
				FailureType: ft, FailureMessage: fm,
				Properties: json.RawMessage(`{}`), Headers: json.RawMessage(fmt.Sprintf(`{"tenant":"t-%d"}`, i%3)),
				Body: []byte(fmt.Sprintf(`{"order":%d,"queue":%q}`, i, q)), FirstFailedAt: now, FailedAt: now,
				Fingerprint: int64(len(msgs) + 1),
			})
		}
	}
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: msgs})
	require.NoError(t, err)
	return messageIDs(t, db, "TRUE")
}

func timeoutFailure(q string, i int) (string, string) {
	if i%2 == 0 {
		return "TimeoutError", fmt.Sprintf("upstream took %dms for order %d", 1000+i, i)
	}
	return "ValueError", fmt.Sprintf("bad value '%d' in field \"qty\"", i)
}

// requireCountersConsistent recounts dead_messages and compares with
// queue_summary and failure_groups, which must have been kept in step.
func requireCountersConsistent(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	var drift int64
	err := db.QueryRow(ctx, `
SELECT count(*) FROM (
  SELECT source_queue, status, count(*) AS n, sum(body_size) AS b FROM dead_messages GROUP BY 1, 2
) a FULL JOIN (SELECT * FROM queue_summary WHERE messages <> 0 OR bytes <> 0) s USING (source_queue, status)
WHERE a.n IS DISTINCT FROM s.messages OR a.b IS DISTINCT FROM s.bytes`).Scan(&drift)
	require.NoError(t, err)
	require.Zero(t, drift, "queue_summary differs from a recount")
	err = db.QueryRow(ctx, `
WITH a AS (
  SELECT group_id,
    count(*) FILTER (WHERE status = 'pending') AS p, count(*) FILTER (WHERE status = 'replaying') AS rg,
    count(*) FILTER (WHERE status = 'replayed') AS rd, count(*) FILTER (WHERE status = 'acknowledged') AS ak
  FROM dead_messages WHERE group_id IS NOT NULL GROUP BY 1)
SELECT count(*) FROM a FULL JOIN failure_groups g ON g.id = a.group_id
WHERE coalesce(a.p, 0) <> g.pending OR coalesce(a.rg, 0) <> g.replaying OR coalesce(a.rd, 0) <> g.replayed
   OR coalesce(a.ak, 0) <> g.acknowledged OR g.id IS NULL`).Scan(&drift)
	require.NoError(t, err)
	require.Zero(t, drift, "failure_groups differs from a recount")
}

func auditCount(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM audit_log`).Scan(&n))
	return n
}

func TestActions(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seed(t, st, db, []string{"orders", "billing"}, 10, timeoutFailure)
	requireCountersConsistent(t, db)
	actor := store.Actor{Name: "token:ops", Role: "operator", Via: "api", RequestID: "req-1"}

	// By ids: two acknowledged, one id missing.
	res, err := st.Acknowledge(ctx, store.Filter{IDs: []int64{ids[0], ids[1], 999999}}, actor, store.ActionOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Changed)
	require.Equal(t, []int64{999999}, res.NotFound)
	requireCountersConsistent(t, db)
	require.Equal(t, 1, auditCount(t, db))

	// Again: nothing changes, both counted as unchanged.
	res, err = st.Acknowledge(ctx, store.Filter{IDs: []int64{ids[0], ids[1]}}, actor, store.ActionOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(0), res.Changed)
	require.Equal(t, int64(2), res.Unchanged)

	// A replaying message is a conflict by id and is left out by filter.
	_, err = db.Exec(ctx, `UPDATE dead_messages SET status = 'replaying' WHERE id = $1`, ids[2])
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE queue_summary SET messages = messages + CASE status WHEN 'replaying' THEN 1 ELSE -1 END,
		bytes = bytes + CASE status WHEN 'replaying' THEN b ELSE -b END
		FROM (SELECT body_size AS b FROM dead_messages WHERE id = $1) x
		WHERE source_queue = 'orders' AND status IN ('pending')`, ids[2])
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO queue_summary (source_queue, status, messages, bytes)
		SELECT source_queue, 'replaying', 1, body_size FROM dead_messages WHERE id = $1`, ids[2])
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE failure_groups SET pending = pending - 1, replaying = replaying + 1
		WHERE id = (SELECT group_id FROM dead_messages WHERE id = $1)`, ids[2])
	require.NoError(t, err)
	requireCountersConsistent(t, db)

	_, err = st.Acknowledge(ctx, store.Filter{IDs: []int64{ids[2], ids[3]}}, actor, store.ActionOptions{})
	require.ErrorIs(t, err, store.ErrConflict)
	require.ErrorIs(t, st.DeleteMessage(ctx, ids[2], actor), store.ErrConflict)

	// Dry run by filter counts and changes nothing, writes no audit row.
	before := auditCount(t, db)
	res, err = st.Delete(ctx, store.Filter{SourceQueue: "orders", Status: "all"}, actor, store.ActionOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, int64(9), res.Matched, "10 orders minus the replaying one")
	require.Zero(t, res.Changed)
	require.Equal(t, before, auditCount(t, db))

	// Above the threshold without confirm: refused with the count.
	_, err = st.Delete(ctx, store.Filter{SourceQueue: "orders", Status: "all"}, actor, store.ActionOptions{ConfirmAbove: 5})
	var ce *store.ConfirmError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, store.ErrConfirmRequired)
	require.Equal(t, int64(6), ce.Matched)

	res, err = st.Delete(ctx, store.Filter{SourceQueue: "orders", Status: "all"}, actor, store.ActionOptions{ConfirmAbove: 5, Confirm: true, Limit: 4})
	require.NoError(t, err)
	require.Equal(t, int64(4), res.Changed)
	requireCountersConsistent(t, db)

	// Scope: a message of another queue is not found.
	err = st.DeleteMessageIn(ctx, ids[15], []string{"orders"}, actor)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, st.DeleteMessageIn(ctx, ids[15], []string{"billing"}, actor))
	require.ErrorIs(t, st.DeleteMessage(ctx, ids[15], actor), store.ErrNotFound)

	// By group.
	groups, err := st.Groups(ctx, store.GroupQuery{SourceQueue: "billing"})
	require.NoError(t, err)
	require.Len(t, groups, 2, "billing: one TimeoutError and one ValueError pattern")
	for _, g := range groups {
		require.Equal(t, "billing", g.SourceQueue)
	}
	res, err = st.Acknowledge(ctx, store.Filter{Group: groups[0].ID}, actor, store.ActionOptions{})
	require.NoError(t, err)
	require.Equal(t, groups[0].Counts.Pending, res.Changed)
	requireCountersConsistent(t, db)

	// One audit row per mutation, with actor and request id.
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE actor = 'token:ops' AND request_id = 'req-1'`).Scan(&n))
	require.Equal(t, auditCount(t, db), n)
	require.Equal(t, 5, n, "ack by ids, ack again (changes nothing, still a request), delete with confirm, scoped single delete, ack by group; refused and not-found requests write none")
}

// TestReturnedMessageMovesGroup: a replayed message that dies again with
// another failure leaves its old group for the new one, and every counter
// stays equal to a recount.
func TestReturnedMessageMovesGroup(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seed(t, st, db, []string{"orders"}, 2, timeoutFailure)
	actor := store.Actor{Name: "test", Via: "test"}
	_, err := st.Acknowledge(ctx, store.Filter{IDs: ids[:1]}, actor, store.ActionOptions{})
	require.NoError(t, err)

	var body []byte
	require.NoError(t, db.QueryRow(ctx, `SELECT body FROM dead_messages WHERE id = $1`, ids[0]).Scan(&body))
	now := time.Now().UTC()
	back := store.NewMessage{
		SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 2,
		FailureType: "KeyError", FailureMessage: "missing key 'sku-9'",
		Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{"trace":"t-77"}`), Body: body,
		FirstFailedAt: now, FailedAt: now, Fingerprint: 99, DLQID: ids[0], ReplayID: "r-1", ReplayCount: 1,
	}
	res, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{back}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Returned)
	requireCountersConsistent(t, db)

	var group string
	var keys []string
	require.NoError(t, db.QueryRow(ctx, `SELECT to_hex(group_id), search_keys FROM dead_messages WHERE id = $1`, ids[0]).Scan(&group, &keys))
	require.Equal(t, strings.TrimLeft(store.GroupIDOf("orders", "rejected", "KeyError", "missing key 'sku-7'"), "0"), group)
	require.Contains(t, keys, "t-77")
	require.Contains(t, keys, "sku-9")
	var returned int64
	require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(sum(returned), 0) FROM queue_activity`).Scan(&returned))
	require.EqualValues(t, 1, returned)
}
