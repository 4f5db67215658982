package consumer_test

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/amqptest"
	"github.com/dlq/dlq/store"
)

// FuzzConvertRaw: for every header table amqp091-go decodes, the row the
// ingest consumer makes from the table's bytes is the row it makes from
// amqp091-go's amqp.Table: headers JSON, death record, failure, search
// values, fingerprint, replay marks, returns and category.
func FuzzConvertRaw(f *testing.F) {
	for _, s := range append(amqptest.Seeds(), amqptest.DeathSeeds()...) {
		f.Add(s)
	}
	rules, err := category.New([]category.Rule{
		{Name: "tenant", Category: category.Permanent, Headers: map[string]string{"tenant": "^acme$"}},
		{Name: "attempt", Category: category.Transient, Headers: map[string]string{"attempt": "^2$"}},
	}, true)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, err := broker.ParseRawTable(in); err != nil {
			return // not decodable: the filter keeps such tables raw (raw_test.go)
		}
		ds, err := amqptest.DecodeTables([][]byte{in}, "dlq-x-q-0", nil)
		if err != nil {
			t.Fatalf("amqp091-go does not decode a table ParseRawTable accepts: %v", err)
		}
		h := ds[0].Headers
		if _, ok := h["x-delivery-count"]; ok {
			return // the filter takes them out of the bytes (broker.FuzzRawTable)
		}
		if _, ok := h["x-acquired-count"]; ok {
			return
		}
		d := amqp.Delivery{Exchange: "dlx", RoutingKey: "rk", MessageId: "m-1", CorrelationId: "c-1", Headers: h, Body: []byte("body")}
		viaTable, viaRaw := consumer.ConvertBoth(d, in, "dlq", now, rules)
		if ambiguousFailure(h) {
			// Two spellings of one failure header differing only in
			// case, neither exact: ExtractFailure takes any one.
			viaTable.Failure, viaRaw.Failure = nil, nil
			viaTable.FailureType, viaRaw.FailureType = "", ""
			viaTable.FailureMessage, viaRaw.FailureMessage = "", ""
			viaTable.Category, viaRaw.Category = "", ""
		}
		sameRow(t, viaTable, viaRaw)
	})
}

// sameRow checks that the table's row a and the raw bytes' row b are the
// same row.
func sameRow(t *testing.T, a, b store.NewMessage) {
	t.Helper()
	if cut := b.DeathHeader; !cut.Empty() {
		// The row leaves x-death to its death record: read back, the
		// headers are the whole JSON again.
		stored := append(append([]byte{}, b.Headers[:cut.From]...), b.Headers[cut.To:]...)
		if got := broker.RestoreDeathHeader(stored, b.XDeath); !bytes.Equal(got, b.Headers) {
			t.Fatalf("stored headers read back as\n%s\nnot\n%s", got, b.Headers)
		}
		b.DeathHeader = store.Span{}
	}
	if !bytes.Equal(a.Headers, b.Headers) {
		t.Fatalf("headers JSON:\ntable %s\nraw   %s", a.Headers, b.Headers)
	}
	// headerSearchValues lists them in map order; what matters is the set.
	slices.Sort(a.HeaderValues)
	slices.Sort(b.HeaderValues)
	if !slices.Equal(a.HeaderValues, b.HeaderValues) || (a.HeaderValues == nil) != (b.HeaderValues == nil) {
		t.Fatalf("search values:\ntable %q\nraw   %q", a.HeaderValues, b.HeaderValues)
	}
	for _, p := range [][2][]byte{{a.XDeath, b.XDeath}, {a.Failure, b.Failure}, {a.Properties, b.Properties}} {
		if !bytes.Equal(p[0], p[1]) {
			t.Fatalf("differs:\ntable %s\nraw   %s", p[0], p[1])
		}
	}
	if !a.FirstFailedAt.Equal(b.FirstFailedAt) || !a.FailedAt.Equal(b.FailedAt) {
		t.Fatalf("times: %v %v, %v %v", a.FirstFailedAt, a.FailedAt, b.FirstFailedAt, b.FailedAt)
	}
	for _, m := range []*store.NewMessage{&a, &b} {
		m.Headers, m.XDeath, m.Failure, m.Properties, m.HeaderValues = nil, nil, nil, nil, nil
		m.FirstFailedAt, m.FailedAt = time.Time{}, time.Time{}
	}
	if a.ConversionError != "" || b.ConversionError != "" {
		t.Fatalf("conversion errors: %q, %q", a.ConversionError, b.ConversionError)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("rows differ:\ntable %+v\nraw   %+v", a, b)
	}
}

// ambiguousFailure reports whether two header names differing only in case
// name one failure field, neither spelt exactly.
func ambiguousFailure(h amqp.Table) bool {
	seen := map[string]int{}
	for k, v := range h {
		if v != nil && broker.IsFailureHeader(k) {
			seen[strings.ToLower(k)]++
		}
	}
	for _, n := range seen {
		if n > 1 {
			return true
		}
	}
	return false
}

// TestConvertRawRealistic: the realistic dead letter, read from bytes,
// gives the row the amqp.Table path gives.
func TestConvertRawRealistic(t *testing.T) {
	for _, in := range amqptest.Seeds() {
		ds, err := amqptest.DecodeTables([][]byte{in}, "dlq-x-q-0", nil)
		if err != nil {
			t.Fatal(err)
		}
		d := realisticDelivery([]byte(`{"id":1}`))
		d.Headers = ds[0].Headers
		viaTable, viaRaw := consumer.ConvertBoth(d, in, "dlq", time.Now(), nil)
		sameRow(t, viaTable, viaRaw)
	}
}

// benchTable is the header table of dlq-bench's dead letters (two deaths).
func benchTable() []byte {
	A, E, S, L := amqptest.Array, amqptest.Entry, amqptest.Str, amqptest.Long
	death := func(queue, reason, exchange string, count int64, extra ...[]byte) []byte {
		return amqptest.Table(append([][]byte{E("count", L(count)), E("reason", S(reason)), E("queue", S(queue)),
			E("time", amqptest.Timestamp(1764300000)), E("exchange", S(exchange)), E("routing-keys", A(S("orders.created")))}, extra...)...)
	}
	return amqptest.Concat(
		E("x-correlation-id", S("bench-abc-00000001")), E("x-tenant", S("acme-1")), E("x-retry-count", []byte{'I', 0, 0, 0, 3}),
		E("x-exception-type", S("OrderValidationError")), E("x-exception-message", S("order total does not match its lines")),
		E("traceparent", S("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")),
		E("x-death", A(death("orders.process", "rejected", "orders", 3), death("orders.retry", "expired", "orders.retry", 2, E("original-expiration", S("10000"))))),
		E("x-first-death-reason", S("expired")), E("x-first-death-queue", S("orders.retry")), E("x-first-death-exchange", S("orders.retry")),
	)
}

// BenchmarkConvertHeaders compares the two paths from what reaches the
// consumer: amqp091-go's table, or the table's bytes.
func BenchmarkConvertHeaders(b *testing.B) {
	table := benchTable()
	ds, err := amqptest.DecodeTables([][]byte{table}, "dlq-x-q-0", nil)
	if err != nil {
		b.Fatal(err)
	}
	d := realisticDelivery(make([]byte, 1024))
	now := time.Now()
	b.Run("table", func(b *testing.B) {
		d := d
		d.Headers = ds[0].Headers
		b.ReportAllocs()
		for b.Loop() {
			_ = consumer.Convert(&d, "dlq", now)
		}
	})
	b.Run("raw", func(b *testing.B) {
		d := d
		d.Headers = nil
		b.ReportAllocs()
		for b.Loop() {
			_ = consumer.ConvertRaw(&d, table, "dlq", now)
		}
	})
}
