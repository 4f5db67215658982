package consumer_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
)

// Every AMQP field type survives publish -> dead-letter -> store, and the
// stored JSON decodes to the same Go values.
func TestIngestHeaderAndPropertyRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := b.sourceQueue(t, "quorum", nil)
	ts := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	app := amqp.Table{
		"string":  "héllo \"quoted\" <tag> \u2028",
		"empty":   "",
		"bool":    true,
		"false":   false,
		"nil":     nil,
		"int8":    int8(-8),
		"uint8":   uint8(200),
		"int16":   int16(-16000),
		"uint16":  uint16(65000),
		"int32":   int32(math.MinInt32),
		"uint32":  uint32(math.MaxUint32),
		"int64":   int64(math.MaxInt64),
		"float32": float32(1.5),
		"float64": 3.141592653589793,
		"decimal": amqp.Decimal{Scale: 3, Value: -12345},
		"time":    ts,
		"bytes":   []byte{0, 1, 2, 0xff, 0xfe},
		"nul_str": "a\x00b",
		"table": amqp.Table{
			"nested": amqp.Table{"deep": int32(7)},
			"list":   []any{"x", int64(1), amqp.Table{"k": []byte("v")}, []any{}},
		},
		"array":       []any{int8(1), uint16(2), float64(3.5), "four", nil, true},
		"empty_table": amqp.Table{},
	}
	props := amqp.Publishing{
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		DeliveryMode:    amqp.Persistent,
		Priority:        7,
		CorrelationId:   "corr-1",
		ReplyTo:         "replies",
		Expiration:      "600000",
		MessageId:       "msg-roundtrip",
		Timestamp:       ts,
		Type:            "order.created",
		UserId:          "guest",
		AppId:           "billing",
		Headers:         app,
		Body:            []byte(`{"order":42}`),
	}
	b.publish(t, "", src, props)
	b.rejectAll(t, src, 1)
	b.waitRows(t, 1, "source_queue = $1", src)
	r := b.rows(t, "source_queue = $1", src)[0]

	stored, err := broker.DecodeHeadersJSON(r.StoredHeaders)
	require.NoError(t, err)
	require.NotContains(t, stored, "x-death", "RabbitMQ's x-death is stored once, in the death record")
	got, err := broker.DecodeHeadersJSON(r.Headers)
	require.NoError(t, err)
	_, hasDeath := got["x-death"]
	require.True(t, hasDeath, "x-death is read with the headers")
	for k := range got {
		if broker.IsBrokerHeader(k) {
			delete(got, k)
		}
	}
	require.Equal(t, dlqtest.InUTC(app), dlqtest.InUTC(got), "application headers come back with identical values and types")

	p, err := broker.ParsePropertiesJSON(r.Properties)
	require.NoError(t, err)
	require.Equal(t, "application/json", p.ContentType)
	require.Equal(t, "gzip", p.ContentEncoding)
	require.Equal(t, uint8(2), p.DeliveryMode)
	require.Equal(t, uint8(7), p.Priority)
	require.Equal(t, "corr-1", p.CorrelationID)
	require.Equal(t, "replies", p.ReplyTo)
	require.Equal(t, "msg-roundtrip", p.MessageID)
	require.NotNil(t, p.Timestamp)
	require.True(t, ts.Equal(*p.Timestamp))
	require.Equal(t, "order.created", p.Type)
	require.Equal(t, "guest", p.UserID)
	require.Equal(t, "billing", p.AppID)
	// RabbitMQ removes the per-message TTL when it dead-letters and keeps it
	// in x-death's original-expiration.
	var deaths []broker.Death
	death := broker.ExtractDeath(mustDecode(t, r.Headers))
	deaths = death.Deaths
	require.Len(t, deaths, 1)
	require.Equal(t, "600000", deaths[0].OriginalExpiration)
	require.Equal(t, `{"order":42}`, string(r.Body))
}

func mustDecode(t *testing.T, b []byte) amqp.Table {
	t.Helper()
	h, err := broker.DecodeHeadersJSON(b)
	require.NoError(t, err)
	return h
}

// Bodies are stored byte for byte, whatever they hold, and two identical
// messages are two rows.
func TestIngestBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := b.sourceQueue(t, "classic", nil)
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>9)
	}
	bodies := map[string][]byte{
		"empty":   {},
		"16MiB":   big,
		"binary":  {0xff, 0xfe, 0x00, 0x00, 'a', 0xc3, 0x28, 0x00},
		"same-1":  []byte("identical body"),
		"same-2":  []byte("identical body"),
		"unicode": []byte("ünïcödé ✓"),
	}
	order := []string{"empty", "16MiB", "binary", "same-1", "same-2", "unicode"}
	for _, name := range order {
		p := amqp.Publishing{Body: bodies[name]}
		if name != "same-1" && name != "same-2" {
			p.Headers = amqp.Table{"case": name}
		}
		b.publish(t, "", src, p)
	}
	b.rejectAll(t, src, len(order))
	b.waitRows(t, len(order), "source_queue = $1", src)

	rows := b.rows(t, "source_queue = $1", src)
	require.Len(t, rows, len(order), "identical messages without a message-id are not merged")
	want := map[[32]byte]int{}
	for _, name := range order {
		want[sha256.Sum256(bodies[name])]++
	}
	got := map[[32]byte]int{}
	for _, r := range rows {
		got[sha256.Sum256(r.Body)]++
		require.Nil(t, r.MessageID)
	}
	require.Equal(t, want, got, "stored bodies are byte-identical (by sha256)")
	var sizes []int
	require.NoError(t, b.db.QueryRow(t.Context(),
		`SELECT array_agg(body_size ORDER BY body_size) FROM dead_messages WHERE source_queue = $1`, src).Scan(&sizes))
	require.Equal(t, []int{0, 8, 14, 14, len(bodies["unicode"]), 16 << 20}, sizes)
}

// Failure details are read from each framework's real header conventions.
func TestIngestFailureConventions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name        string
		headers     amqp.Table
		props       amqp.Publishing
		wantType    string
		wantMessage string
		wantOrigin  string
		wantInStack string
	}{
		{
			name: "spring",
			headers: amqp.Table{
				// Spring's RepublishMessageRecoverer puts the cause's message here.
				"x-exception-message":    "order 42 not found",
				"x-exception-stacktrace": "org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: Listener threw exception\n\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.wrapToListenerExecutionFailedExceptionIfNeeded(AbstractMessageListenerContainer.java:1746)\nCaused by: java.lang.IllegalStateException: order 42 not found",
				"x-original-exchange":    "orders",
				"x-original-routingKey":  "orders.created",
			},
			wantType:    "java.lang.IllegalStateException",
			wantMessage: "order 42 not found",
			wantOrigin:  "spring",
			wantInStack: "AbstractMessageListenerContainer.java:1746",
		},
		{
			name: "masstransit",
			headers: amqp.Table{
				"MT-Fault-ExceptionType": "System.TimeoutException",
				"MT-Fault-Message":       "upstream took too long",
				"MT-Fault-StackTrace":    "   at Billing.Consumer.Consume(ConsumeContext`1 context) in /src/Consumer.cs:line 42",
				"MT-Fault-Timestamp":     "2026-03-04T05:06:07.1234567Z",
				"MT-Reason":              "fault",
				"MT-Host-MachineName":    "billing-7f9",
			},
			wantType:    "System.TimeoutException",
			wantMessage: "upstream took too long",
			wantOrigin:  "masstransit",
			wantInStack: "Consumer.cs:line 42",
		},
		{
			name: "nservicebus",
			headers: amqp.Table{
				"NServiceBus.ExceptionInfo.ExceptionType": "System.InvalidOperationException",
				"NServiceBus.ExceptionInfo.Message":       "Sequence contains no elements",
				"NServiceBus.ExceptionInfo.StackTrace":    "System.InvalidOperationException: Sequence contains no elements\n   at System.Linq.ThrowHelper.ThrowNoElementsException()",
				"NServiceBus.ExceptionInfo.Source":        "System.Linq",
				"NServiceBus.FailedQ":                     "Sales.OrderHandler",
				"NServiceBus.TimeOfFailure":               "2026-03-04 05:06:07:123456 Z",
			},
			wantType:    "System.InvalidOperationException",
			wantMessage: "Sequence contains no elements",
			wantOrigin:  "nservicebus",
			wantInStack: "ThrowNoElementsException",
		},
		{
			name: "celery",
			headers: amqp.Table{
				"lang":       "py",
				"task":       "billing.tasks.charge",
				"id":         "8c0b5d0e-6a7b-4c1d-9e2f-0a1b2c3d4e5f",
				"retries":    int32(3),
				"argsrepr":   "(42,)",
				"kwargsrepr": "{'currency': 'EUR'}",
				"root_id":    "8c0b5d0e-6a7b-4c1d-9e2f-0a1b2c3d4e5f",
				"origin":     "gen1@worker-1",
			},
			props:      amqp.Publishing{CorrelationId: "8c0b5d0e-6a7b-4c1d-9e2f-0a1b2c3d4e5f", ContentType: "application/json"},
			wantOrigin: "celery",
		},
		{
			name: "generic",
			headers: amqp.Table{
				"x-exception-type": "TimeoutError",
				"x-error-message":  "upstream took too long",
				"x-error-stack":    "Traceback (most recent call last):\n  File \"worker.py\", line 9",
			},
			wantType:    "TimeoutError",
			wantMessage: "upstream took too long",
			wantOrigin:  "generic",
			wantInStack: "worker.py",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := b.sourceQueue(t, "classic", nil)
			p := tc.props
			p.Headers = tc.headers
			p.Body = []byte(tc.name)
			b.publish(t, "", src, p)
			b.rejectAll(t, src, 1)
			b.waitRows(t, 1, "source_queue = $1", src)
			r := b.rows(t, "source_queue = $1", src)[0]
			require.NotNil(t, r.Failure, "failure details recorded")
			var f broker.Failure
			require.NoError(t, json.Unmarshal(r.Failure, &f))
			require.Equal(t, tc.wantOrigin, f.Origin)
			require.Equal(t, tc.wantType, f.Type)
			require.Equal(t, tc.wantMessage, f.Message)
			if tc.wantType != "" {
				require.Equal(t, tc.wantType, deref(r.FailureType))
			}
			if tc.wantInStack != "" {
				require.Contains(t, f.Stack, tc.wantInStack)
			}
			if tc.name == "celery" {
				require.Equal(t, "billing.tasks.charge", f.Extra["task"])
				require.Equal(t, "3", f.Extra["retries"])
				require.Equal(t, "(42,)", f.Extra["argsrepr"])
			}
			if tc.name == "nservicebus" {
				require.NotNil(t, f.At)
				require.True(t, f.At.Equal(time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)), "NServiceBus time parsed: %v", f.At)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// A message published straight to the dead-letter exchange (no x-death) is
// still stored, with reason unknown and the routing key it came with.
func TestIngestWithoutDeathHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := fmt.Sprintf("direct.%d", time.Now().UnixNano())
	b.publish(t, b.exchange, key, amqp.Publishing{Body: []byte("no death")})
	b.waitRows(t, 1, "source_routing_key = $1", key)
	r := b.rows(t, "source_routing_key = $1", key)[0]
	require.Equal(t, "unknown", r.Reason)
	require.Equal(t, "", r.SourceQueue)
	require.Equal(t, b.exchange, r.SourceExchange)
	require.Equal(t, key, r.SourceRoutingKey)
	require.Equal(t, int64(0), r.DeathCount, "no death record, no count")
	require.Nil(t, r.Failure, "no failure convention matched")
	require.Equal(t, "pending", r.Status)
	require.True(t, bytes.Equal([]byte("no death"), r.Body))
}
