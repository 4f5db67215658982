package broker

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/dlq/dlq/internal/amqptest"
)

// rabbitDeath is an x-death entry as RabbitMQ writes it.
func rabbitDeath(queue, reason string, count int64, expiration string) []byte {
	e, str := amqptest.Entry, amqptest.Str
	entries := [][]byte{e("count", amqptest.Long(count)), e("reason", str(reason)), e("queue", str(queue)),
		e("time", amqptest.Timestamp(1764300000+count)), e("exchange", str(queue+".x")),
		e("routing-keys", amqptest.Array(str(queue+".created"), str("b"))),
	}
	if expiration != "" {
		entries = append(entries, e("original-expiration", str(expiration)))
	}
	return amqptest.Table(entries...)
}

// deathHeaderSeeds are header tables with RabbitMQ's x-death, before,
// between and after other headers, alone, and in the shapes that must be
// stored whole.
func deathHeaderSeeds() [][]byte {
	e, str := amqptest.Entry, amqptest.Str
	xd := e("x-death", amqptest.Array(rabbitDeath("orders", "rejected", 3, ""), rabbitDeath("orders.retry", "expired", 2, "10000")))
	return [][]byte{
		amqptest.Concat(xd),
		amqptest.Concat(e("a", str("first")), xd),
		amqptest.Concat(xd, e("z", str("last"))),
		amqptest.Concat(e("traceparent", str("00-4bf9")), xd, e("x-first-death-queue", str("orders.retry")),
			e("x-exception-message", str("order total does not match")), e("x-retry-count", amqptest.Long(3))),
		// What remains would read as a typed value: stored whole.
		amqptest.Concat(e("type", str("order")), e("value", str("1")), xd),
		// Keys that are not plain text: base64 keys, stored whole.
		amqptest.Concat(e("\xff", str("k")), xd),
		// Text that is not UTF-8 in an entry: stored whole.
		amqptest.Concat(e("x-death", amqptest.Array(rabbitDeath("q\xff", "rejected", 1, "")))),
		// A count that is not a long: stored whole.
		amqptest.Concat(e("x-death", amqptest.Array(amqptest.Table(e("count", amqptest.Str("1")), e("queue", str("q")))))),
	}
}

func TestDeathHeaderLeftOutAndRestored(t *testing.T) {
	seeds := deathHeaderSeeds()
	for i, in := range seeds {
		rt, err := ParseRawTable(in)
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		deaths := ExtractDeathRaw(rt).Deaths
		hj, span := rt.AppendJSONDeathSpan(nil, deaths)
		if want := rt.AppendJSON(nil); !bytes.Equal(hj, want) {
			t.Fatalf("seed %d: JSON %s, AppendJSON writes %s", i, hj, want)
		}
		// The first four are RabbitMQ's shape in plain tables: left out.
		if wantCut := i < 4; span.Empty() == wantCut {
			t.Fatalf("seed %d: span %+v of %s, want it cut: %v", i, span, hj, wantCut)
		}
		if span.Empty() {
			continue
		}
		stored := append(append([]byte{}, hj[:span.From]...), hj[span.To:]...)
		if bytes.Contains(stored, []byte(`"x-death"`)) || !strings.HasPrefix(string(stored), "{") {
			t.Fatalf("seed %d: stored %s", i, stored)
		}
		if got := RestoreDeathHeader(stored, AppendDeathsJSON(nil, deaths)); !bytes.Equal(got, hj) {
			t.Fatalf("seed %d: restored\n%s\nwant\n%s", i, got, hj)
		}
	}
}

// RabbitMQ's x-death is written from its death record, not walked a
// second time (exactDeathEntry); any other shape is walked and compared.
func TestDeathHeaderWrittenFromRecord(t *testing.T) {
	e, str := amqptest.Entry, amqptest.Str
	for i, in := range deathHeaderSeeds() {
		rt, err := ParseRawTable(in)
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		ExtractDeathRaw(rt)
		// The seeds' x-death entries are RabbitMQ's but for the last two
		// (text that is not UTF-8 is still exact; the rebuild is not
		// used for it because it is not rebuildable).
		if wantExact := i < 7; (rt.exact != nil) != wantExact {
			t.Errorf("seed %d: written from the record: %v, want %v", i, rt.exact != nil, wantExact)
		}
	}
	// That the record, not the header, is what gets written: a count
	// changed in the record after it was read shows in the JSON when the
	// header is written from it, and would not if it were walked.
	for i, in := range deathHeaderSeeds()[:4] {
		rt, err := ParseRawTable(in)
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		deaths := ExtractDeathRaw(rt).Deaths
		deaths[0].Count = 987654321
		hj, _ := rt.AppendJSONDeathSpan(nil, deaths)
		if !bytes.Contains(hj, []byte("987654321")) {
			t.Errorf("seed %d: the x-death header was walked, not written from the record: %s", i, hj)
		}
		if bytes.Contains(rt.AppendJSON(nil), []byte("987654321")) {
			t.Fatalf("seed %d: the header itself holds the changed count", i)
		}
	}
	for name, entry := range map[string][]byte{
		"an extra key":                 amqptest.Table(e("count", amqptest.Long(1)), e("exchange", str("x")), e("queue", str("q")), e("reason", str("rejected")), e("routing-keys", amqptest.Array()), e("time", amqptest.Timestamp(1764300000)), e("zone", str("eu"))),
		"no time":                      amqptest.Table(e("count", amqptest.Long(1)), e("exchange", str("x")), e("queue", str("q")), e("reason", str("rejected")), e("routing-keys", amqptest.Array())),
		"an empty original-expiration": amqptest.Table(e("count", amqptest.Long(1)), e("exchange", str("x")), e("original-expiration", str("")), e("queue", str("q")), e("reason", str("rejected")), e("routing-keys", amqptest.Array()), e("time", amqptest.Timestamp(1764300000))),
		"a routing key that is a long": amqptest.Table(e("count", amqptest.Long(1)), e("exchange", str("x")), e("queue", str("q")), e("reason", str("rejected")), e("routing-keys", amqptest.Array(amqptest.Long(1))), e("time", amqptest.Timestamp(1764300000))),
		"routing keys as one string":   amqptest.Table(e("count", amqptest.Long(1)), e("exchange", str("x")), e("queue", str("q")), e("reason", str("rejected")), e("routing-keys", str("q")), e("time", amqptest.Timestamp(1764300000))),
		"a time that is a long":        amqptest.Table(e("count", amqptest.Long(1)), e("exchange", str("x")), e("queue", str("q")), e("reason", str("rejected")), e("routing-keys", amqptest.Array()), e("time", amqptest.Long(1764300000))),
	} {
		rt, err := ParseRawTable(amqptest.Concat(e("x-death", amqptest.Array(entry))))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		deaths := ExtractDeathRaw(rt).Deaths
		if rt.exact != nil {
			t.Errorf("%s: written from the record, want walked", name)
		}
		if hj, _ := rt.AppendJSONDeathSpan(nil, deaths); !bytes.Equal(hj, rt.AppendJSON(nil)) {
			t.Errorf("%s: JSON %s, AppendJSON writes %s", name, hj, rt.AppendJSON(nil))
		}
	}
}

func TestRestoreDeathHeaderLeavesWholeRowsAlone(t *testing.T) {
	record := []byte(`[{"queue":"q","reason":"rejected","exchange":"","routing_keys":["q"],"count":1,"time":"2026-11-28T00:00:00Z"}]`)
	for _, headers := range []string{
		`{"x-death":[1]}`, // stored whole
		`{"type":"table","encoding":"base64","value":{"eC1kZWF0aA==":[]}}`, // base64 keys
		`{"type":"table","value":{"type":"x"}}`,                            // a lookalike, wrapped
		`not json`,
		`{"a":1,}`,
	} {
		if got := RestoreDeathHeader([]byte(headers), record); string(got) != headers {
			t.Errorf("RestoreDeathHeader(%s) = %s, want it unchanged", headers, got)
		}
	}
	for _, rec := range []string{`[]`, `null`, ``, `[{"count":"x"}]`} {
		if got := RestoreDeathHeader([]byte(`{"a":"b"}`), []byte(rec)); string(got) != `{"a":"b"}` {
			t.Errorf("death record %q: %s, want the headers unchanged", rec, got)
		}
	}
	want := `{"a":"b","x-death":[{"count":{"type":"int64","value":1},"exchange":"","queue":"q","reason":"rejected","routing-keys":["q"],"time":{"type":"timestamp","value":"2026-11-28T00:00:00Z"}}],"z":"y"}`
	if got := RestoreDeathHeader([]byte(`{"a":"b","z":"y"}`), record); string(got) != want {
		t.Errorf("restored\n%s\nwant\n%s", got, want)
	}
}

// FuzzDeathHeader: for every header table, a row stored without the span
// reads back as the whole JSON, and a row stored whole reads as stored.
func FuzzDeathHeader(f *testing.F) {
	for _, s := range append(append(deathHeaderSeeds(), amqptest.Seeds()...), amqptest.DeathSeeds()...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		rt, err := ParseRawTable(in)
		if err != nil {
			return
		}
		deaths := ExtractDeathRaw(rt).Deaths
		record := AppendDeathsJSON(nil, deaths)
		if deaths == nil {
			record = []byte(`[]`) // as consumer.deathRecord stores it
		}
		hj, span := rt.AppendJSONDeathSpan(nil, deaths)
		if want := rt.AppendJSON(nil); !bytes.Equal(hj, want) {
			t.Fatalf("JSON %s, AppendJSON writes %s", hj, want)
		}
		// The death record is read without reflection, as encoding/json
		// reads it, or left to encoding/json.
		if fast, ok := parseDeathRecord(record); ok {
			var slow []Death
			err := json.Unmarshal(record, &slow)
			if err != nil || (len(fast) > 0 || len(slow) > 0) && !reflect.DeepEqual(fast, slow) {
				t.Fatalf("death record %s: read as %+v, encoding/json reads %+v (%v)", record, fast, slow, err)
			}
		} else if !span.Empty() {
			t.Fatalf("death record %s of a row stored without x-death is not read without reflection", record)
		}
		if got := RestoreDeathHeader(hj, record); !bytes.Equal(got, hj) {
			t.Fatalf("whole headers changed on read:\n%s\nto\n%s", hj, got)
		}
		if span.Empty() {
			return
		}
		stored := append(append([]byte{}, hj[:span.From]...), hj[span.To:]...)
		if _, err := DecodeHeadersJSON(stored); err != nil {
			t.Fatalf("stored headers %s do not decode: %v", stored, err)
		}
		if got := RestoreDeathHeader(stored, record); !bytes.Equal(got, hj) {
			t.Fatalf("restored\n%s\nwant\n%s", got, hj)
		}
	})
}

// BenchmarkRestoreDeathHeader: what a read pays per plain message for the
// x-death ingest left to the death record (dlq-bench's retry-loop headers).
func BenchmarkRestoreDeathHeader(b *testing.B) {
	headers := []byte(`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","x-correlation-id":"bench-0df84513-00000000","x-exception-message":"order total does not match its lines","x-exception-type":"OrderValidationError","x-first-death-exchange":"orders.retry","x-first-death-queue":"orders.retry","x-first-death-reason":"expired","x-retry-count":{"type":"int32","value":3},"x-tenant":"acme-0"}`)
	xd := []byte(`[{"queue":"orders.process","reason":"rejected","exchange":"orders","routing_keys":["orders.created"],"count":3,"time":"2026-11-28T23:56:05Z"},{"queue":"orders.retry","reason":"expired","exchange":"orders.retry","routing_keys":["orders.created"],"count":2,"time":"2026-11-28T23:55:05Z","original_expiration":"10000"}]`)
	b.ReportAllocs()
	for b.Loop() {
		RestoreDeathHeader(headers, xd)
	}
}
