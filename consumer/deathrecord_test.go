package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// apiDeathBefore is how the API derived x_death from a row until the death
// record was stored (api.fillDeath, removed): the stored headers' x-death
// value decoded and parsed, most recent first, [] when there is none.
func apiDeathBefore(deathHeader json.RawMessage) string {
	if len(deathHeader) == 0 || string(deathHeader) == "null" {
		return "[]"
	}
	h, err := broker.DecodeHeadersJSON([]byte(`{"x-death":` + string(deathHeader) + `}`))
	if err != nil {
		return "[]"
	}
	deaths := broker.ExtractDeath(h).Deaths
	if len(deaths) == 0 {
		return "[]"
	}
	b, err := json.Marshal(deaths)
	if err != nil {
		return "[]"
	}
	return string(b)
}

// deathHeaderCases are x-death values (and the headers around them) that
// RabbitMQ writes or a publisher could forge, with every kind of value the
// codec writes where the parser reads text, numbers and times.
func deathHeaderCases() map[string]amqp.Table {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	entry := func(kv ...any) amqp.Table {
		t := amqp.Table{}
		for i := 0; i < len(kv); i += 2 {
			t[kv[i].(string)] = kv[i+1]
		}
		return t
	}
	rabbit := entry("count", int64(3), "reason", "rejected", "queue", "orders", "time", at,
		"exchange", "orders-x", "routing-keys", []any{"orders.created", "orders.all"})
	return map[string]amqp.Table{
		"none":           {"tenant": "acme"},
		"rabbitmq":       {"x-death": []any{rabbit}},
		"two deaths":     {"x-death": []any{entry("count", int64(1), "reason", "expired", "queue", "retry", "time", at.Add(time.Minute), "exchange", "", "routing-keys", []any{"orders"}, "original-expiration", "5000"), rabbit}},
		"not an array":   {"x-death": "rejected"},
		"a table":        {"x-death": rabbit},
		"empty array":    {"x-death": []any{}},
		"non-table rows": {"x-death": []any{"x", int64(1), nil, []any{rabbit}, rabbit}},
		"empty entry":    {"x-death": []any{amqp.Table{}}},
		"typed lookalike entry": {"x-death": []any{
			entry("type", "table", "value", "v"), entry("type", int32(1))}},
		"base64 keys in entry": {"x-death": []any{entry("queue\x00", "q0", "queue", "orders", "reason", "maxlen", "count", int64(2), "k\xff", "v")}},
		"base64 header key":    {"x-death": []any{rabbit}, "bad\xfekey": "v"},
		"text forms": {"x-death": []any{entry(
			"queue", []byte("bytes-queue"), "reason", "caf\xe9\x00<&>\u2028\u2029\"\\\n\t\x01\x7f\ufffd",
			"exchange", []byte{0xf0, 0x9f, 0x98, 0x80, 0xed, 0xa0, 0x80, 0xc0, 0xaf, 0xf4, 0x90, 0x80, 0x80, 'a', 0xe0, 0x80},
			"original-expiration", []byte{})}},
		"routing keys": {"x-death": []any{
			entry("routing-keys", "single"),
			entry("routing-keys", []byte("bytes-alone")),
			entry("routing-keys", []any{"a", []byte("b\xff"), int64(1), nil, amqp.Table{"k": "v"}, "caf\xe9", ""}),
			entry("routing-keys", int32(7)),
			entry("routing-keys", amqp.Table{"0": "a"}),
		}},
		"counts": {"x-death": []any{
			entry("count", int8(-8)), entry("count", int16(16)), entry("count", int32(-32)),
			entry("count", int64(math.MaxInt64)), entry("count", int64(math.MinInt64)),
			entry("count", uint8(255)), entry("count", uint16(65535)), entry("count", uint32(math.MaxUint32)),
			entry("count", "  42\t"), entry("count", "+7"), entry("count", "-0"), entry("count", "007"),
			entry("count", "\u2028\u00a0 9\u3000\u0085\v"), entry("count", "9223372036854775807"),
			entry("count", "9223372036854775808"), entry("count", "-9223372036854775809"),
			entry("count", "1e3"), entry("count", "5x"), entry("count", ""), entry("count", "٣"),
			entry("count", []byte(" 12 ")), entry("count", "1\x002"), entry("count", "\xff1"),
			entry("count", 2.5), entry("count", float32(3)), entry("count", true), entry("count", nil),
			entry("count", amqp.Decimal{Scale: 1, Value: 5}), entry("count", []any{int64(1)}),
		}},
		"times": {"x-death": []any{
			entry("time", at), entry("time", time.Unix(0, 0)),
			entry("time", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)), entry("time", time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)),
			entry("time", time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC)), entry("time", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)),
			entry("time", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)), entry("time", time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)),
			entry("time", int64(1700000000)), entry("time", int32(-1)), entry("time", uint32(math.MaxUint32)),
			entry("time", int16(1000)), entry("time", uint16(1000)), entry("time", int64(math.MaxInt64)),
			entry("time", int64(math.MinInt64)), entry("time", int64(253402300800)), entry("time", int64(-62135596800)),
			entry("time", int64(-62135596799)), entry("time", "2026-01-01T00:00:00Z"), entry("time", 1.7e9),
		}},
	}
}

// randomDeathHeaders builds x-death arrays from random pieces of the cases
// above: what the SQL derivation must get right is every combination.
func randomDeathHeaders(r *rand.Rand, cases map[string]amqp.Table) amqp.Table {
	var values []any
	for _, h := range cases {
		if xd, ok := h["x-death"].([]any); ok {
			for _, e := range xd {
				if t, ok := e.(amqp.Table); ok {
					for _, v := range t {
						values = append(values, v)
					}
				}
			}
		}
	}
	fields := []string{"queue", "reason", "exchange", "routing-keys", "count", "time", "original-expiration", "other"}
	entries := make([]any, r.IntN(4))
	for i := range entries {
		t := amqp.Table{}
		for _, f := range fields {
			if r.IntN(3) > 0 {
				t[f] = values[r.IntN(len(values))]
			}
		}
		entries[i] = t
	}
	return amqp.Table{"x-death": entries}
}

// The death record ingest stores (Go) and the one migration 00070 derives
// in SQL for rows stored before it (dlq_x_death) are the same text, and
// both are what the API answered before the record was stored.
func TestDeathRecordSQLMatchesIngest(t *testing.T) {
	t.Parallel()
	_, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	check := func(name string, h amqp.Table) {
		t.Helper()
		d := amqp.Delivery{Headers: h, Body: []byte("b")}
		m := consumer.Convert(&d, "dlq", time.Now())
		require.Empty(t, m.ConversionError, name)
		var fromSQL string
		var before json.RawMessage
		require.NoError(t, db.QueryRow(ctx, `SELECT dlq_x_death($1::json)::text, $1::json -> 'x-death'`,
			string(m.Headers)).Scan(&fromSQL, &before), name)
		require.Equal(t, string(m.XDeath), fromSQL, "%s: headers %s", name, m.Headers)
		if _, unsafeKey := h["bad\xfekey"]; unsafeKey {
			// The API read x-death by its plain key and missed it when
			// every key was in base64: the stored record has it.
			require.Equal(t, "[]", apiDeathBefore(before), name)
			require.NotEqual(t, "[]", string(m.XDeath), name)
			return
		}
		require.Equal(t, apiDeathBefore(before), string(m.XDeath), "%s: headers %s", name, m.Headers)
	}
	cases := deathHeaderCases()
	for name, h := range cases {
		check(name, h)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		check(fmt.Sprintf("random %d", i), randomDeathHeaders(r, cases))
	}
}

// Rows stored before migration 00070, or without a death record since (an
// older dlq still running, a benchmark's COPY), are read through the
// derivation until the backfill older_rows writes their record; either
// way the API shows what ingest stores now.
func TestDeathRecordOfRowsStoredBeforeTheMigration(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	batch := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	want := map[string]string{}
	for name, h := range deathHeaderCases() {
		d := amqp.Delivery{MessageId: name, Headers: h, Body: []byte(name)}
		m := consumer.Convert(&d, "dlq", time.Now())
		want[name] = string(m.XDeath)
		batch.Messages = append(batch.Messages, m)
	}
	_, err := st.IngestBatch(ctx, batch)
	require.NoError(t, err)
	got := func() map[string]string {
		t.Helper()
		page, err := st.ListMessages(ctx, store.Filter{Status: "all"}, store.ListOptions{Limit: 100})
		require.NoError(t, err)
		out := map[string]string{}
		for _, m := range page.Messages {
			out[*m.MessageID] = string(m.XDeath)
		}
		return out
	}
	require.Equal(t, want, got(), "as ingest stored them")
	var unfilled int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL`).Scan(&unfilled))
	require.Zero(t, unfilled, "ingest stores every record")

	// As rows stored before migration 00070, or by an older dlq since.
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `UPDATE dead_messages SET x_death = NULL`)
	require.NoError(t, err)
	require.Equal(t, want, got(), "derived when read")
	for name, w := range want {
		var id int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM dead_messages WHERE message_id = $1`, name).Scan(&id))
		m, err := st.GetMessage(ctx, id, nil)
		require.NoError(t, err)
		require.Equal(t, w, string(m.XDeath), name)
	}

	lease := dlqtest.Lease(t, st, "backfills")
	for after := int64(0); ; {
		b, err := st.BackfillOlderRows(ctx, lease, after, 7, false, nil)
		require.NoError(t, err)
		if b.Last == 0 {
			break
		}
		after = b.Last
	}
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL`).Scan(&unfilled))
	require.Zero(t, unfilled, "the backfill writes every record")
	require.Equal(t, want, got(), "as the backfill wrote them")
}

// A replayed message that dies again returns to its record with the new
// death, and its death record follows.
func TestDeathRecordFollowsAReturn(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	death := func(queue, reason string, n int64) amqp.Table {
		return amqp.Table{"count": n, "reason": reason, "queue": queue, "time": at, "exchange": "", "routing-keys": []any{queue}}
	}
	first := amqp.Delivery{Body: []byte("order 7"), Headers: amqp.Table{"x-death": []any{death("orders", "rejected", 1)}}}
	m := consumer.Convert(&first, "dlq", time.Now())
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{m}})
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.QueryRow(ctx, `SELECT id FROM dead_messages`).Scan(&id))

	again := amqp.Delivery{Body: []byte("order 7"), Headers: amqp.Table{
		"x-death":                []any{death("orders", "expired", 1), death("orders", "rejected", 1)},
		broker.HeaderID:          id,
		broker.HeaderReplayID:    "r-1",
		broker.HeaderReplayCount: int64(1),
	}}
	back := consumer.Convert(&again, "dlq", time.Now())
	res, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{back}})
	require.NoError(t, err)
	require.Equal(t, []store.Outcome{store.OutcomeReturned}, res.Outcomes)
	got, err := st.GetMessage(ctx, id, nil)
	require.NoError(t, err)
	require.Equal(t, string(back.XDeath), string(got.XDeath))
	var deaths []broker.Death
	require.NoError(t, json.Unmarshal(got.XDeath, &deaths))
	require.Len(t, deaths, 2)
	require.Equal(t, "expired", deaths[0].Reason, "most recent first")
	var stored bool
	require.NoError(t, db.QueryRow(ctx, `SELECT x_death IS NOT NULL FROM dead_messages WHERE id = $1`, id).Scan(&stored))
	require.True(t, stored, "stored with the return, not derived when read")
}
