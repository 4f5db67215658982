package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func msg(queue, body string, fp int64) store.NewMessage {
	now := time.Now().UTC().Truncate(time.Microsecond)
	return store.NewMessage{
		SourceQueue:     queue,
		DeadLetterQueue: "dlq",
		Reason:          "rejected",
		DeathCount:      1,
		Properties:      json.RawMessage(`{}`),
		Headers:         json.RawMessage(`{"x-death":[]}`),
		Body:            []byte(body),
		FirstFailedAt:   now,
		FailedAt:        now,
		Fingerprint:     fp,
		// As from a classic queue: redeliveries carry no return count, so
		// only the fingerprint and the batches decide.
		Returns: store.ReturnsUnknown,
	}
}

func ingest(t *testing.T, st *store.Store, msgs ...store.NewMessage) (int64, store.IngestResult) {
	t.Helper()
	id := store.NewBatchID()
	res, err := st.IngestBatch(context.Background(), store.IngestBatch{ID: id, Consumer: "test", Messages: msgs})
	require.NoError(t, err)
	return id, res
}

func count(t *testing.T, db *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), "SELECT count(*) FROM dead_messages WHERE "+where, args...).Scan(&n))
	return n
}

// messageIDs returns the ids of the stored messages matching where, in
// id order.
func messageIDs(t *testing.T, db *pgxpool.Pool, where string, args ...any) []int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT id FROM dead_messages WHERE "+where+" ORDER BY id", args...)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

type snapshot struct {
	status, reason string
	replayCount    int
	headers        string
	failedAt       time.Time
}

func rowState(t *testing.T, db *pgxpool.Pool, id int64) snapshot {
	t.Helper()
	var s snapshot
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT status, reason, replay_count, headers::text, failed_at FROM dead_messages WHERE id = $1`, id).
		Scan(&s.status, &s.reason, &s.replayCount, &s.headers, &s.failedAt))
	return s
}

func summary(t *testing.T, db *pgxpool.Pool, queue string) map[string]int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT status, messages FROM queue_summary WHERE source_queue = $1`, queue)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		require.NoError(t, rows.Scan(&s, &n))
		if n != 0 {
			out[s] = n
		}
	}
	return out
}

func TestIngestFirstDeliveriesAreNeverMerged(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	_, res := ingest(t, st, msg("q", "same", 1), msg("q", "same", 1))
	require.Equal(t, 2, res.Inserted)
	_, res = ingest(t, st, msg("q", "same", 1))
	require.Equal(t, 1, res.Inserted)
	require.Equal(t, 3, count(t, db, "source_queue = 'q'"))
	require.Equal(t, map[string]int64{"pending": 3}, summary(t, db, "q"))
}

func TestIngestRedeliveryOfUnconfirmedBatchIsADuplicate(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	batch, _ := ingest(t, st, msg("q", "a", 10), msg("q", "b", 11))
	var id int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT id FROM dead_messages WHERE fingerprint = 10`).Scan(&id))
	before := rowState(t, db, id)

	ok, err := st.BatchCommitted(context.Background(), batch)
	require.NoError(t, err)
	require.True(t, ok)

	// The ack was lost: both come back redelivered.
	re := msg("q", "a", 10)
	re.Redelivered = true
	re.Reason = "expired" // must not be applied
	re2 := msg("q", "b", 11)
	re2.Redelivered = true
	_, res := ingest(t, st, re, re2)
	require.Equal(t, 2, res.Duplicates)
	require.Equal(t, 0, res.Inserted)
	require.Equal(t, []store.Outcome{store.OutcomeDuplicate, store.OutcomeDuplicate}, res.Outcomes)
	require.Equal(t, before, rowState(t, db, id), "a redelivery changes nothing")
	require.Equal(t, 2, count(t, db, "TRUE"))

	// The absorbing batch's ack may be lost too: while it is unconfirmed a
	// further redelivery is still the same message.
	absorbing, res := ingest(t, st, re)
	require.Equal(t, 1, res.Duplicates)
	require.Equal(t, 2, count(t, db, "TRUE"))
	// Once that ack is confirmed, an identical redelivered copy is another
	// message.
	require.NoError(t, st.ConfirmBatches(context.Background(), []int64{absorbing}))
	_, res = ingest(t, st, re)
	require.Equal(t, 1, res.Inserted)
	require.Equal(t, map[string]int64{"pending": 3}, summary(t, db, "q"))
}

// A replayed message whose record is gone is stored as a new row, and a
// redelivery of it (its acknowledgement lost) is that row: a duplicate,
// not a second row. It was stored again, since a message with x-dlq-id
// never reached the redelivery match.
func TestIngestRedeliveryOfAReturnWithoutRecordIsADuplicate(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	orphan := msg("q", "replayed, record deleted since", 50)
	orphan.DLQID, orphan.ReplayID, orphan.ReplayCount = 987654, "replay-x", 1
	_, res := ingest(t, st, orphan)
	require.Equal(t, []store.Outcome{store.OutcomeInserted}, res.Outcomes)

	re := orphan
	re.Redelivered = true
	_, res = ingest(t, st, re)
	require.Equal(t, []store.Outcome{store.OutcomeDuplicate}, res.Outcomes, "the redelivery of the stored row")
	require.Equal(t, 1, count(t, db, "TRUE"))
	require.Equal(t, map[string]int64{"pending": 1}, summary(t, db, "q"))
}

// One replay publish that dies twice (the exchange routed it to two
// queues that both dead-letter it) comes back twice as first deliveries
// with the same x-dlq-replay-id: both deaths return to the record, the
// first kept in its death history. The second was taken for a redelivery
// of the first and dropped: acknowledged, never stored.
func TestIngestTwoDeathsOfOneReplayPublish(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingest(t, st, msg("orders.a", "payload", 60))
	id := messageIDs(t, db, "TRUE")[0]

	inA := msg("orders.a", "payload", 61)
	inA.DLQID, inA.ReplayID, inA.ReplayCount = id, "replay-1", 1
	inA.Reason = "rejected"
	inB := inA
	inB.SourceQueue, inB.Reason, inB.Fingerprint = "orders.b", "expired", 62
	_, res := ingest(t, st, inA)
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes)
	_, res = ingest(t, st, inB)
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes, "a first delivery is never dropped")
	require.Equal(t, "expired", rowState(t, db, id).reason, "the later death is the row's")
	var history int
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT jsonb_array_length(death_history) FROM dead_messages WHERE id = $1`, id).Scan(&history))
	require.Equal(t, 2, history, "the first death and the one in orders.a, kept")

	// Its redelivery (the ack of that batch lost) changes nothing.
	re := inB
	re.Redelivered = true
	re.Reason = "maxlen"
	_, res = ingest(t, st, re)
	require.Equal(t, []store.Outcome{store.OutcomeDuplicate}, res.Outcomes)
	require.Equal(t, "expired", rowState(t, db, id).reason)
	require.Equal(t, 1, count(t, db, "TRUE"))
}

func TestIngestRedeliveryAfterConfirmedAckIsANewMessage(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	batch, _ := ingest(t, st, msg("q", "a", 20))
	require.NoError(t, st.ConfirmBatches(context.Background(), []int64{batch}))
	ok, err := st.BatchCommitted(context.Background(), batch)
	require.NoError(t, err)
	require.False(t, ok)
	// The first one was acknowledged for sure, so an identical redelivered
	// message must be a different dead message.
	re := msg("q", "a", 20)
	re.Redelivered = true
	_, res := ingest(t, st, re)
	require.Equal(t, 1, res.Inserted)
	require.Equal(t, 2, count(t, db, "TRUE"))
}

func TestIngestConfirmedInTheNextBatch(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	first, _ := ingest(t, st, msg("q", "a", 30))
	_, err := st.IngestBatch(context.Background(), store.IngestBatch{
		ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{msg("q", "b", 31)}, Confirmed: []int64{first},
	})
	require.NoError(t, err)
	ok, err := st.BatchCommitted(context.Background(), first)
	require.NoError(t, err)
	require.False(t, ok, "confirmed batches leave ingest_inflight in the next transaction")
}

// Consumers recognising redeliveries of identical content at once: each
// stored row absorbs at most one redelivery. (Rows inserted by the racing
// transactions are themselves in unconfirmed batches, so they are
// legitimate candidates for the later ones.)
func TestIngestConcurrentRedeliveryMatching(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingest(t, st, msg("q", "x", 40))
	var wg sync.WaitGroup
	results := make([]store.IngestResult, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := msg("q", "x", 40)
			m.Redelivered = true
			res, err := st.IngestBatch(context.Background(), store.IngestBatch{ID: store.NewBatchID(), Consumer: "c", Messages: []store.NewMessage{m}})
			require.NoError(t, err)
			results[i] = res
		}()
	}
	wg.Wait()
	dups, ins := 0, 0
	for _, r := range results {
		dups += r.Duplicates
		ins += r.Inserted
	}
	require.Equal(t, 8, dups+ins)
	require.GreaterOrEqual(t, dups, 1)
	require.Equal(t, 9-dups, count(t, db, "TRUE"))
}

func TestIngestReplayedMessageReturnsToItsRecord(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingest(t, st, msg("orders", "payload", 50))
	var id int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT id FROM dead_messages`).Scan(&id))
	// What replay does, minus the broker: the row is replayed once.
	_, err := db.Exec(context.Background(), `
WITH u AS (UPDATE dead_messages SET status = 'replayed', replay_count = 1, replayed_at = now() WHERE id = $1 RETURNING body_size)
UPDATE queue_summary SET messages = messages + CASE status WHEN 'pending' THEN -1 ELSE 1 END,
       bytes = bytes + CASE status WHEN 'pending' THEN -(SELECT body_size FROM u) ELSE (SELECT body_size FROM u) END
WHERE source_queue = 'orders' AND status = 'pending'`, id)
	require.NoError(t, err)
	_, err = db.Exec(context.Background(), `INSERT INTO queue_summary (source_queue, status, messages, bytes) VALUES ('orders', 'replayed', 1, 7)`)
	require.NoError(t, err)

	back := msg("orders", "payload", 51)
	back.DLQID, back.ReplayID, back.ReplayCount = id, "replay-1", 1
	back.Reason = "expired"
	back.Headers = json.RawMessage(`{"x-death":[{"count":{"type":"int64","value":2}}]}`)
	_, res := ingest(t, st, back)
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes)
	s := rowState(t, db, id)
	require.Equal(t, "pending", s.status)
	require.Equal(t, 1, s.replayCount, "replay_count kept")
	require.Equal(t, "expired", s.reason, "death details updated")
	require.JSONEq(t, `{"x-death":[{"count":{"type":"int64","value":2}}]}`, s.headers, "the new death's headers, stored as written")
	require.Equal(t, 1, count(t, db, "TRUE"), "no second record")
	require.Equal(t, map[string]int64{"pending": 1}, summary(t, db, "orders"))

	// The same death redelivered changes nothing.
	back.Redelivered = true
	back.Reason = "maxlen"
	_, res = ingest(t, st, back)
	require.Equal(t, []store.Outcome{store.OutcomeDuplicate}, res.Outcomes)
	require.Equal(t, "expired", rowState(t, db, id).reason)

	// A later replay's death comes back too, raising replay_count if the
	// replayer had not yet recorded it.
	again := back
	again.Redelivered = false
	again.ReplayID, again.ReplayCount = "replay-2", 2
	_, res = ingest(t, st, again)
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes)
	require.Equal(t, 2, rowState(t, db, id).replayCount)
	require.Equal(t, map[string]int64{"pending": 1}, summary(t, db, "orders"))

	// An x-dlq-id whose body differs, or that names no row, is a new message.
	other := msg("orders", "different body", 52)
	other.DLQID, other.ReplayID = id, "replay-3"
	gone := msg("orders", "payload", 53)
	gone.DLQID, gone.ReplayID = id+1000, "replay-4"
	_, res = ingest(t, st, other, gone)
	require.Equal(t, []store.Outcome{store.OutcomeInserted, store.OutcomeInserted}, res.Outcomes)
	require.Equal(t, 3, count(t, db, "TRUE"))
	require.Equal(t, map[string]int64{"pending": 3}, summary(t, db, "orders"))
}

// Text PostgreSQL cannot hold (NUL, invalid UTF-8) never makes a batch fail.
func TestIngestOddText(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	m := msg("q\x00ueue\xff", "body", 60)
	m.MessageID = "id\x00\xfe"
	m.FailureType = "Type\x00"
	m.FailureMessage = "bad \xc3\x28 utf8"
	m.SourceRoutingKey = "\xff"
	_, res := ingest(t, st, m)
	require.Equal(t, 1, res.Inserted)
	require.Equal(t, 1, count(t, db, "message_id = $1", "id\uFFFD\uFFFD"))
}

// returned is m delivered again after the broker had returned it n times.
func returned(m store.NewMessage, n int) store.NewMessage {
	m.Redelivered = n > 0
	m.Returns = n
	return m
}

// Identical messages (twins) share a fingerprint. With two of them stored in
// unconfirmed batches, a redelivery could be either one or a third twin
// that was never stored: it is stored, so a twin is never lost.
func TestIngestRedeliveryAmongTwinsIsStored(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingest(t, st, returned(msg("q", "twin", 60), 0), returned(msg("q", "twin", 60), 0))
	_, res := ingest(t, st, returned(msg("q", "twin", 60), 1))
	require.Equal(t, 1, res.Inserted, "two candidates: the redelivery is stored, not matched")
	require.Equal(t, 3, count(t, db, "fingerprint = 60"))
}

// Returns only grow: a delivery returned no more often than the one a row
// was stored from cannot be that row's redelivery, so it is a twin.
func TestIngestRedeliveryReturnedNoMoreOftenIsATwin(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingest(t, st, returned(msg("q", "r", 61), 0))

	_, res := ingest(t, st, returned(msg("q", "r", 61), 1))
	require.Equal(t, 1, res.Duplicates, "returned once after a row stored from a first delivery: its redelivery")
	require.Equal(t, 1, count(t, db, "fingerprint = 61 AND ingest_returns = 1"), "the row now stands for the delivery it absorbed")

	_, res = ingest(t, st, returned(msg("q", "r", 61), 1))
	require.Equal(t, 1, res.Inserted, "returned as often as the row's own delivery: a twin, stored")
	require.Equal(t, 2, count(t, db, "fingerprint = 61"))

	// Unknown counts on either side do not decide; the single-candidate
	// rule still does (two candidates now).
	_, res = ingest(t, st, returned(msg("q", "r", 61), store.ReturnsUnknown))
	require.Equal(t, 1, res.Inserted)
}

// The common case, distinct messages, stays exact with return counts: one
// candidate, returned more often than its row, matched every time its
// acknowledgement is lost again.
func TestIngestRedeliveryWithReturnCountsIsMatchedEachTime(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingest(t, st, returned(msg("q", "one", 62), 0))
	for n := 1; n <= 3; n++ {
		_, res := ingest(t, st, returned(msg("q", "one", 62), n))
		require.Equal(t, 1, res.Duplicates, "redelivery %d", n)
	}
	require.Equal(t, 1, count(t, db, "fingerprint = 62 AND ingest_returns = 3"))
}
