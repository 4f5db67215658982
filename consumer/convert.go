package consumer

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// Conversion is the consumer's edge: package broker reads a delivery's
// headers (codec, death record, failure details, dlq's replay marks) into
// its own types, and only here do they become a store row.

// Convert turns a delivery from dlq's queue into a row to store. It never
// fails: a delivery whose headers cannot be encoded is kept with its body
// and properties and the error recorded, so nothing is dropped and nothing
// loops.
func Convert(d *amqp.Delivery, queue string, now time.Time) store.NewMessage {
	m, _ := convert(d, queue, now, nil)
	return m
}

// headerTables gives back the header tables the frame filter took out of
// deliveries (broker.Conn): those amqp091-go cannot decode, and those it
// delivered as bytes.
type headerTables interface {
	UndecodableHeaders(headers amqp.Table) ([]byte, bool)
	RawHeaders(headers amqp.Table, body []byte) (table, message []byte, ok bool)
}

// convert is Convert for a delivery that may have come through a frame
// filter (tables, when set, gives back what it took out). It also returns
// the table read from bytes, when the delivery carried it so (nil when
// the headers are in d.Headers), for the category rules. A table that came
// in front of the body is split off: d.Body is the message's body after.
func convert(d *amqp.Delivery, queue string, now time.Time, tables headerTables) (m store.NewMessage, rt *broker.RawTable) {
	defer func() {
		if r := recover(); r != nil {
			m, rt = raw(d, queue, now, fmt.Errorf("panic while converting: %v", r)), nil
		}
	}()
	if tables != nil {
		if table, ok := tables.UndecodableHeaders(d.Headers); ok {
			return undecodableRow(d, queue, now, table), nil
		}
		table, body, ok := tables.RawHeaders(d.Headers, d.Body)
		if ok {
			d.Body = body
			return convertRaw(d, queue, now, table)
		}
	}
	// Our own quorum queue adds the return counts on redelivery; storing
	// them would make a redelivery look different from the first delivery.
	headers := broker.WithoutReturnCounts(d.Headers)
	hj, err := broker.AppendHeadersJSON(make([]byte, 0, 256+64*len(headers)), headers)
	if err != nil {
		return raw(d, queue, now, err), nil
	}
	return row(d, queue, now, hj, headers, broker.ExtractDeath(headers), headerSearchValues(headers)), nil
}

// convertRaw is convert for a delivery whose header table (without the
// return counts) came as bytes: the same row, read without decoding the
// whole table (broker.RawTable).
func convertRaw(d *amqp.Delivery, queue string, now time.Time, table []byte) (store.NewMessage, *broker.RawTable) {
	t, err := broker.ParseRawTable(table)
	if err != nil {
		// The filter only passes tables amqp091-go decodes; should one
		// not be, it is still kept whole.
		return undecodableRow(d, queue, now, table), nil
	}
	// The death straight from the bytes: decoding x-death's entries into
	// tables was most of what converting a delivery cost.
	death := broker.ExtractDeathRaw(t)
	hj, span := t.AppendJSONDeathSpan(make([]byte, 0, 256+64*t.Len()), death.Deaths)
	m := row(d, queue, now, hj, t.Table(broker.IsExtractedHeader), death, rawSearchValues(t))
	m.DeathHeader = store.Span{From: span.From, To: span.To}
	return m, t
}

// row is the row of a delivery whose headers (without the return counts)
// encode as hj; headers holds at least the broker.IsExtractedHeader names,
// death is what the death headers say (broker.ExtractDeath), and vals the
// header search values.
func row(d *amqp.Delivery, queue string, now time.Time, hj []byte, headers amqp.Table, death broker.DeathInfo, vals []string) (m store.NewMessage) {
	props := broker.PropertiesOf(d)
	// 256: a message id, a correlation id, a type and a timestamp already
	// pass 128 bytes, and growing the buffer was one allocation a message.
	pj := props.AppendJSON(make([]byte, 0, 256))
	fail := broker.ExtractFailure(headers, props)

	m = store.NewMessage{
		MessageID:        d.MessageId,
		CorrelationID:    d.CorrelationId,
		SourceQueue:      broker.ShortStr(death.SourceQueue),
		SourceExchange:   broker.ShortStr(death.SourceExchange),
		SourceRoutingKey: broker.ShortStr(death.SourceRoutingKey),
		DeadLetterQueue:  queue,
		Reason:           death.Reason,
		DeathCount:       death.Count,
		FailureType:      fail.Type,
		FailureMessage:   fail.Message,
		Properties:       pj,
		Headers:          hj,
		XDeath:           deathRecord(death.Deaths),
		Body:             d.Body,
		FirstFailedAt:    death.FirstTime,
		FailedAt:         now,
		Redelivered:      d.Redelivered,
		Returns:          returns(d),
		HeaderValues:     vals,
		ContentType:      d.ContentType,
		ContentEncoding:  d.ContentEncoding,
		ContentKnown:     true,
	}
	if m.SourceQueue == "" && death.Reason == "unknown" {
		// Published straight to the dead-letter exchange, not dead-lettered:
		// the routing key is the best description of where it came from.
		m.SourceRoutingKey = d.RoutingKey
		m.SourceExchange = d.Exchange
	}
	if m.FirstFailedAt.IsZero() || m.FirstFailedAt.After(now) {
		m.FirstFailedAt = now
	}
	if fail.Type != "" || fail.Message != "" || fail.Stack != "" || fail.Origin != "" || len(fail.Extra) > 0 || fail.At != nil {
		m.Failure = fail.AppendJSON(make([]byte, 0, 64+len(fail.Type)+len(fail.Message)+len(fail.Stack)))
	}
	m.DLQID, m.ReplayID, m.ReplayCount = broker.ReplayMarks(headers)
	m.Fingerprint = fingerprint(d, pj, hj)
	return m
}

// noDeaths is the death record of a message without x-death entries.
const noDeaths = `[]`

// deathRecord is the x-death entries as the API shows them (x_death): most
// recent first, [] when there are none. It is stored with the row, so a
// read never parses the headers again.
func deathRecord(deaths []broker.Death) json.RawMessage {
	if len(deaths) == 0 {
		return json.RawMessage(noDeaths)
	}
	return broker.AppendDeathsJSON(make([]byte, 0, 192*len(deaths)), deaths)
}

// returns is how many times the broker had returned d to dlq's queue
// before this delivery (broker.ReturnCount), store.ReturnsUnknown when the
// broker did not say.
func returns(d *amqp.Delivery) int {
	n, known := broker.ReturnCount(d)
	if !known {
		return store.ReturnsUnknown
	}
	return n
}

// raw keeps what can always be kept when conversion failed.
func raw(d *amqp.Delivery, queue string, now time.Time, cause error) store.NewMessage {
	m := store.NewMessage{
		MessageID:        d.MessageId,
		DeadLetterQueue:  queue,
		Reason:           "unknown",
		Properties:       json.RawMessage(`{}`),
		Headers:          json.RawMessage(`{}`),
		XDeath:           json.RawMessage(noDeaths),
		Body:             d.Body,
		FirstFailedAt:    now,
		FailedAt:         now,
		Redelivered:      d.Redelivered,
		Returns:          returns(d),
		ConversionError:  cause.Error(),
		SourceExchange:   d.Exchange,
		SourceRoutingKey: d.RoutingKey,
	}
	func() {
		defer func() { _ = recover() }()
		m.Properties = broker.PropertiesOf(d).AppendJSON(nil)
	}()
	m.Fingerprint = fingerprint(d, m.Properties, nil)
	return m
}

// undecodableRow keeps a delivery whose header table amqp091-go could not
// decode (broker/framefilter.go): body and properties as always, and the
// table's AMQP encoding, byte for byte, as the one header
// broker.HeaderUndecodable.
func undecodableRow(d *amqp.Delivery, queue string, now time.Time, table []byte) store.NewMessage {
	m := raw(d, queue, now, broker.UndecodableError(len(table)))
	if hj, err := broker.AppendHeadersJSON(nil, amqp.Table{broker.HeaderUndecodable: table}); err == nil {
		m.Headers = hj
	}
	m.Fingerprint = fingerprint(d, m.Properties, m.Headers)
	return m
}

// fingerprint identifies a delivery's content: everything RabbitMQ carries
// for it except what changes on redelivery. It is only ever compared among
// the rows of unconfirmed batches (a few thousand at most), so a fast 64-bit
// non-cryptographic hash is plenty; it runs for every message.
func fingerprint(d *amqp.Delivery, props, headers []byte) int64 {
	h := xxhash.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(d.Exchange), []byte(d.RoutingKey), props, headers, d.Body} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(part)))
		_, _ = h.Write(n[:])
		_, _ = h.Write(part)
	}
	return int64(h.Sum64())
}
