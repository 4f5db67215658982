package security

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
)

// TestReplayRoundTripEncrypted: with encryption on (every header sealed),
// a replay sends the body byte for byte, every property, and every
// application header with its AMQP type.
func TestReplayRoundTripEncrypted(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.env["DLQ_ENCRYPTION_KEYS"] = newKey(t, "k1")
	d.serve(nil)
	ts := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	app := amqp.Table{
		"string": "héllo \"quoted\" <tag> \u2028", "empty": "", "bool": true, "false": false, "nil": nil,
		"int8": int8(-8), "uint8": uint8(200), "int16": int16(-16000), "uint16": uint16(65000),
		"int32": int32(math.MinInt32), "uint32": uint32(math.MaxUint32), "int64": int64(math.MaxInt64),
		"float32": float32(1.5), "float64": 3.141592653589793, "decimal": amqp.Decimal{Scale: 3, Value: -12345},
		"time": ts, "bytes": []byte{0, 1, 2, 0xff, 0xfe}, "nul_str": "a\x00b", "bad_utf8": "\xff\xfe",
		"table":       amqp.Table{"nested": amqp.Table{"deep": int32(7)}, "list": []any{"x", int64(1), amqp.Table{"k": []byte("v")}, []any{}}},
		"array":       []any{int8(1), uint16(2), float64(3.5), "four", nil, true},
		"empty_table": amqp.Table{},
	}
	body := []byte{0, 1, 2, 0xff, 'x', 0x80, '\n', 0}
	d.deadLetter(amqp.Publishing{
		ContentType: "application/octet-stream", ContentEncoding: "gzip", DeliveryMode: amqp.Persistent, Priority: 7,
		CorrelationId: "corr-1", ReplyTo: "replies", MessageId: "msg-roundtrip", Timestamp: ts, Type: "order.created",
		AppId: "billing", Headers: app, Body: body,
	})
	stored := d.waitMessages(1)[0]
	id := stored.ID
	// The sealed row leaves x-death to its death record; the API reads it
	// back with its AMQP types.
	deaths, ok := stored.Headers["x-death"].([]any)
	require.True(t, ok, "x-death in the headers the API shows: %v", stored.Headers)
	require.Len(t, deaths, 1)
	require.Equal(t, map[string]any{"type": "int64", "value": float64(1)}, deaths[0].(map[string]any)["count"])
	require.Equal(t, d.source, deaths[0].(map[string]any)["queue"])
	d.replayTo(tokOperator, id)
	got := d.sinkMessages(1)[0]

	require.Equal(t, body, got.Body, "byte for byte")
	require.Equal(t, "application/octet-stream", got.ContentType)
	require.Equal(t, "gzip", got.ContentEncoding)
	require.Equal(t, amqp.Persistent, got.DeliveryMode)
	require.Equal(t, uint8(7), got.Priority)
	require.Equal(t, "corr-1", got.CorrelationId)
	require.Equal(t, "replies", got.ReplyTo)
	require.Equal(t, "msg-roundtrip", got.MessageId)
	require.True(t, ts.Equal(got.Timestamp))
	require.Equal(t, "order.created", got.Type)
	require.Equal(t, "billing", got.AppId)
	h := amqp.Table{}
	for k, v := range got.Headers {
		if !broker.IsBrokerHeader(k) && k != "x-death" && k != broker.HeaderID && k != broker.HeaderReplayCount && k != broker.HeaderReplayID &&
			k != "x-first-death-exchange" && k != "x-first-death-queue" && k != "x-first-death-reason" &&
			k != "x-last-death-exchange" && k != "x-last-death-queue" && k != "x-last-death-reason" {
			h[k] = v
		}
	}
	require.Equal(t, dlqtest.InUTC(app), dlqtest.InUTC(h), "every header back with its value and type")
	require.Equal(t, id, got.Headers[broker.HeaderID])
}

// TestDeathHeaderStoredOnce: a dead letter's row leaves RabbitMQ's x-death
// to its death record, and the API shows it in the headers as RabbitMQ
// sent it, with its AMQP types, plain or sealed (TestReplayRoundTripEncrypted).
func TestDeathHeaderStoredOnce(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.serve(nil)
	d.deadLetter(amqp.Publishing{MessageId: "once", Headers: amqp.Table{"tenant": "acme"}, Body: []byte("x")})
	m := d.waitMessages(1)[0]

	var stored, record string
	require.NoError(t, basePool(t).QueryRow(context.Background(), fmt.Sprintf(
		`SELECT headers::text, x_death::text FROM %q.dead_messages WHERE id = $1`, d.schema), m.ID).Scan(&stored, &record))
	require.NotContains(t, stored, "x-death", "the column leaves x-death to the death record")
	require.Contains(t, record, d.source)

	deaths, ok := m.Headers["x-death"].([]any)
	require.True(t, ok, "x-death in the headers the API shows: %v", m.Headers)
	require.Len(t, deaths, 1)
	death := deaths[0].(map[string]any)
	require.Equal(t, map[string]any{"type": "int64", "value": float64(1)}, death["count"])
	require.Equal(t, "expired", death["reason"])
	require.Equal(t, d.source, death["queue"])
	require.Equal(t, []any{d.source}, death["routing-keys"])
	require.Equal(t, "timestamp", death["time"].(map[string]any)["type"])
	require.Equal(t, "acme", m.Headers["tenant"])
}
