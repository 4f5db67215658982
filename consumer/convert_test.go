package consumer_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
)

// realisticDelivery is what a dead letter looks like on dlq's queue: an
// x-death table, the first-death headers and a few application headers.
func realisticDelivery(body []byte) amqp.Delivery {
	now := time.Now().Truncate(time.Second)
	return amqp.Delivery{
		Exchange:    "dlx",
		RoutingKey:  "orders.created",
		MessageId:   "9f2c6a1e-3b4d-4c5e-8f90-123456789abc",
		ContentType: "application/json",
		Timestamp:   now,
		AppId:       "orders",
		Headers: amqp.Table{
			"x-death": []any{amqp.Table{
				"count": int64(1), "reason": "rejected", "queue": "orders",
				"time": now, "exchange": "orders", "routing-keys": []any{"orders.created"},
			}},
			"x-first-death-reason":   "rejected",
			"x-first-death-queue":    "orders",
			"x-first-death-exchange": "orders",
			"x-exception-type":       "TimeoutError",
			"x-error-message":        "upstream took too long",
			"tenant":                 "acme",
			"attempt":                int32(3),
			"trace-id":               "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		},
		Body: body,
	}
}

func TestConvert(t *testing.T) {
	d := realisticDelivery([]byte(`{"id":1}`))
	d.Headers[broker.HeaderID] = int64(42)
	d.Headers[broker.HeaderReplayID] = "r-1"
	d.Headers[broker.HeaderReplayCount] = int64(2)
	d.Headers["x-delivery-count"] = int64(3)
	now := time.Now()
	m := consumer.Convert(&d, "dlq", now)
	require.Equal(t, "orders", m.SourceQueue)
	require.Equal(t, "orders", m.SourceExchange)
	require.Equal(t, "orders.created", m.SourceRoutingKey)
	require.Equal(t, "rejected", m.Reason)
	require.Equal(t, int64(1), m.DeathCount)
	require.Equal(t, "TimeoutError", m.FailureType)
	require.Equal(t, int64(42), m.DLQID)
	require.Equal(t, "r-1", m.ReplayID)
	require.Equal(t, int64(2), m.ReplayCount)
	require.NotContains(t, string(m.Headers), "x-delivery-count", "our queue's redelivery counter is not part of the message")
	require.Empty(t, m.ConversionError)

	// A redelivery (x-delivery-count added, redelivered flag set) has the
	// same fingerprint as the first delivery.
	first := realisticDelivery([]byte(`{"id":1}`))
	again := realisticDelivery([]byte(`{"id":1}`))
	again.Headers = first.Headers
	again.Redelivered = true
	h := amqp.Table{}
	for k, v := range first.Headers {
		h[k] = v
	}
	h["x-delivery-count"] = int64(1)
	again.Headers = h
	require.Equal(t, consumer.Convert(&first, "dlq", now).Fingerprint, consumer.Convert(&again, "dlq", now).Fingerprint)
	other := realisticDelivery([]byte(`{"id":2}`))
	other.Headers = first.Headers
	require.NotEqual(t, consumer.Convert(&first, "dlq", now).Fingerprint, consumer.Convert(&other, "dlq", now).Fingerprint)
}

// A Go value AMQP cannot carry (only possible from a misbehaving client
// library) is stored raw with the error, never dropped.
func TestConvertUnencodableHeaderIsKeptRaw(t *testing.T) {
	d := realisticDelivery([]byte("body"))
	d.Headers["weird"] = struct{}{}
	m := consumer.Convert(&d, "dlq", time.Now())
	require.NotEmpty(t, m.ConversionError)
	require.Contains(t, m.ConversionError, "weird")
	require.Equal(t, []byte("body"), m.Body)
	require.Equal(t, "dlq", m.DeadLetterQueue)
}

func BenchmarkConvert(b *testing.B) {
	for _, size := range []int{1024, 16384} {
		d := realisticDelivery(make([]byte, size))
		now := time.Now()
		b.Run(byteSize(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				_ = consumer.Convert(&d, "dlq", now)
			}
		})
	}
}

func byteSize(n int) string {
	if n >= 1024 {
		return string(rune('0'+n/1024/10%10)) + string(rune('0'+n/1024%10)) + "KiB"
	}
	return "B"
}
