package consumer_test

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/store"
)

// Convert hands store.SearchKeys the header values from the decoded table;
// the keys must be the ones store derives from the stored header JSON, for
// every AMQP type and the awkward cases of the codec (base64 strings and
// keys, typed-looking tables, deep nesting, long values).
func TestSearchValuesMatchStoredHeaders(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	cases := map[string]amqp.Table{
		"realistic": realisticDelivery(nil).Headers,
		"every type": {
			"s": "Order-77", "i8": int8(-8), "i16": int16(1600), "i32": int32(-320000), "i64": int64(6400000000),
			"u8": uint8(200), "u16": uint16(60000), "u32": uint32(4000000000), "f32": float32(1.5), "f64": 2.25,
			"bool": true, "ts": now, "dec": amqp.Decimal{Scale: 2, Value: 12345}, "bytes": []byte("raw-bytes"),
			"nil": nil, "arr": []any{"in-array", int32(5)},
		},
		"nested": {
			"ctx":   amqp.Table{"tenant": "Acme-1", "n": int64(99), "deeper": amqp.Table{"hidden": "not-indexed"}},
			"typed": amqp.Table{"type": "int32", "value": int64(7)},
			"odd":   amqp.Table{"k\x00ey": "nul-key"},
			"typ":   amqp.Table{"type": int32(5), "x": "shown"},
			"look":  amqp.Table{"type": int32(5), "value": "hidden"},
			"user":  amqp.Table{"type": "order", "id": "O-1"},
		},
		"unsafe strings": {
			"nul": "a\x00b", "latin1": "caf\xe9", "ok": "plain-value", "long": strings.Repeat("y", 300),
			"x-first-death-queue": "orders", "x-last-death-reason": "expired",
		},
		"failure text": {
			"x-exception-type": "TimeoutError", "x-error-message": "order 42 timed out", "trace": "T-1",
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			d := realisticDelivery([]byte("body"))
			d.Headers = h
			m := consumer.Convert(&d, "dlq", now)
			require.Empty(t, m.ConversionError)
			require.NotNil(t, m.HeaderValues)
			fromTable := store.SearchKeys(&m)
			m.HeaderValues = nil
			fromJSON := store.SearchKeys(&m)
			require.ElementsMatch(t, fromJSON, fromTable, "headers JSON: %s", m.Headers)
		})
	}
}

func BenchmarkConvertAndSearchKeys(b *testing.B) {
	d := realisticDelivery(make([]byte, 1024))
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		m := consumer.Convert(&d, "dlq", now)
		_ = store.SearchKeys(&m)
	}
}
