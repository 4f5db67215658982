package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

type deathEntry struct {
	FailedAt        string  `json:"failed_at"`
	Reason          string  `json:"reason"`
	DeathCount      int64   `json:"death_count"`
	DeadLetterQueue string  `json:"dead_letter_queue"`
	FailureType     *string `json:"failure_type"`
	FailureMessage  *string `json:"failure_message"`
	// XDeath is the replaced death's hops; compared apart (JSONEq).
	XDeath json.RawMessage `json:"x_death"`
}

// TestDeathHistory: each time a replayed message dies again, the death it
// replaces is appended to the record's death_history, oldest first, in
// UTC; the latest death stays in the row's own fields; the history keeps
// the last DeathHistoryMax deaths; a redelivery of a death adds nothing.
func TestDeathHistory(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	first := msg("orders", "payload", 70)
	first.FailureType, first.FailureMessage = "TimeoutError", "took too long"
	first.FailedAt = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.FixedZone("CET", 3600))
	first.XDeath = json.RawMessage(`[{"queue":"orders","reason":"rejected","count":2,"exchange":"","routing_keys":["orders"],"time":"2026-01-02T02:04:00Z"}]`)
	ingest(t, st, first)
	var id int64
	require.NoError(t, db.QueryRow(ctx, `SELECT id FROM dead_messages`).Scan(&id))

	history := func() []deathEntry {
		t.Helper()
		m, err := st.GetMessage(ctx, id, nil)
		require.NoError(t, err)
		var h []deathEntry
		require.NoError(t, json.Unmarshal(m.DeathHistory, &h), "death_history is a JSON array: %s", m.DeathHistory)
		return h
	}
	require.Empty(t, history(), "a message that never came back has no earlier deaths")
	m, err := st.GetMessage(ctx, id, nil)
	require.NoError(t, err)
	require.JSONEq(t, `[]`, string(m.DeathHistory), "shown as [], not null")

	back := func(n int, reason string) store.NewMessage {
		b := msg("orders", "payload", int64(100+n))
		b.DLQID, b.ReplayID, b.ReplayCount = id, fmt.Sprintf("replay-%d", n), int64(n)
		b.Reason, b.DeathCount = reason, int64(n+1)
		b.DeadLetterQueue = fmt.Sprintf("dlq-%d", n)
		b.FailedAt = first.FailedAt.Add(time.Duration(n) * time.Minute)
		return b
	}
	_, res := ingest(t, st, back(1, "expired"))
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes)
	h := history()
	require.Len(t, h, 1)
	require.JSONEq(t, string(first.XDeath), string(h[0].XDeath), "the replaced death keeps its hops")
	h[0].XDeath = nil
	require.Equal(t, deathEntry{
		FailedAt: "2026-01-02T02:04:05.123456Z", Reason: "rejected", DeathCount: 1, DeadLetterQueue: "dlq",
		FailureType: strp("TimeoutError"), FailureMessage: strp("took too long"),
	}, h[0], "the replaced death, in UTC")
	require.Equal(t, "expired", rowState(t, db, id).reason, "the latest death is the row's own")

	// The same death redelivered adds nothing.
	dup := back(1, "expired")
	dup.Redelivered = true
	_, res = ingest(t, st, dup)
	require.Equal(t, []store.Outcome{store.OutcomeDuplicate}, res.Outcomes)
	require.Len(t, history(), 1)

	_, res = ingest(t, st, back(2, "maxlen"))
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes)
	h = history()
	require.Len(t, h, 2)
	require.Equal(t, "rejected", h[0].Reason, "oldest first")
	require.Equal(t, "expired", h[1].Reason, "newest last")
	require.Equal(t, "dlq-1", h[1].DeadLetterQueue)
	require.Equal(t, int64(2), h[1].DeathCount)
	require.Nil(t, h[1].FailureType)

	// Bounded: only the last DeathHistoryMax earlier deaths are kept.
	for n := 3; n <= store.DeathHistoryMax+5; n++ {
		_, res = ingest(t, st, back(n, fmt.Sprintf("reason-%d", n)))
		require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes)
	}
	h = history()
	require.Len(t, h, store.DeathHistoryMax)
	last := store.DeathHistoryMax + 5
	require.Equal(t, fmt.Sprintf("reason-%d", last-1), h[len(h)-1].Reason, "the death replaced last")
	require.Equal(t, fmt.Sprintf("reason-%d", last-store.DeathHistoryMax), h[0].Reason, "older ones dropped")
	require.Equal(t, fmt.Sprintf("reason-%d", last), rowState(t, db, id).reason)
	require.Equal(t, last, rowState(t, db, id).replayCount)
	require.Equal(t, 1, count(t, db, "TRUE"))
}

func strp(s string) *string { return &s }

// A message that dies again with the same death record as before (the same
// hops in the same second, after a replay) keeps it: the trigger of
// migration 00080, which clears a record an older dlq left unchanged while
// replacing the death, took this version's identical record for one, and
// with x-death no longer in the stored headers the record was lost.
func TestDeathRecordKeptWhenTheSameAgain(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	record := json.RawMessage(`[{"queue":"orders","reason":"rejected","count":1,"exchange":"","routing_keys":["orders"],"time":"2026-01-02T02:04:00Z"}]`)
	first := msg("orders", "payload", 80)
	first.FailedAt = time.Date(2026, 1, 2, 2, 4, 0, 100000000, time.UTC)
	first.XDeath = record
	ingest(t, st, first)
	var id int64
	require.NoError(t, db.QueryRow(ctx, `SELECT id FROM dead_messages`).Scan(&id))

	again := msg("orders", "payload", 81)
	again.DLQID, again.ReplayID, again.ReplayCount = id, "replay-1", 1
	again.FailedAt = first.FailedAt.Add(300 * time.Millisecond)
	again.XDeath = record
	_, res := ingest(t, st, again)
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes)
	var stored *string
	require.NoError(t, db.QueryRow(ctx, `SELECT x_death::text FROM dead_messages WHERE id = $1`, id).Scan(&stored))
	require.NotNil(t, stored, "the death record was cleared")
	require.JSONEq(t, string(record), *stored)
}
