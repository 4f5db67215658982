package broker

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/store"
)

// Replay headers dlq adds to what it republishes. A message carrying
// HeaderID that dies again returns to its own record.
const (
	HeaderID          = "x-dlq-id"
	HeaderReplayCount = "x-dlq-replay-count"
	HeaderReplayID    = "x-dlq-replay-id"
)

// brokerHeaders are set by RabbitMQ on dead-lettering or redelivery. They
// describe the broker's handling, not the application's message: they are
// stripped on replay (RabbitMQ ignores or mangles republished ones).
var brokerHeaders = map[string]bool{
	"x-death":                true,
	"x-first-death-reason":   true,
	"x-first-death-queue":    true,
	"x-first-death-exchange": true,
	"x-last-death-reason":    true,
	"x-last-death-queue":     true,
	"x-last-death-exchange":  true,
	"x-delivery-count":       true,
	"x-acquired-count":       true,
}

// IsBrokerHeader reports whether RabbitMQ, not the application, owns header k.
func IsBrokerHeader(k string) bool { return brokerHeaders[k] }

// Convert turns a delivery from dlq's queue into a row to store. It never
// fails: a delivery whose headers cannot be encoded is kept with its body
// and properties and the error recorded, so nothing is dropped and nothing
// loops.
func Convert(d *amqp.Delivery, queue string, now time.Time) (m store.NewMessage) {
	defer func() {
		if r := recover(); r != nil {
			m = raw(d, queue, now, fmt.Errorf("panic while converting: %v", r))
		}
	}()
	if tok, ok := d.Headers[HeaderUndecodable].(int64); ok {
		if table, ok := takeUndecodable(tok); ok {
			return undecodable(d, queue, now, table)
		}
	}
	// Our own quorum queue adds the return counts on redelivery; storing
	// them would make a redelivery look different from the first delivery.
	headers := d.Headers
	if hasReturnCount(headers) {
		headers = make(amqp.Table, len(d.Headers))
		for k, v := range d.Headers {
			if !isReturnCount(k) {
				headers[k] = v
			}
		}
	}
	hj, err := AppendHeadersJSON(make([]byte, 0, 256+64*len(headers)), headers)
	if err != nil {
		return raw(d, queue, now, err)
	}
	props := PropertiesOf(d)
	pj := props.AppendJSON(make([]byte, 0, 128))
	death := ExtractDeath(headers)
	fail := ExtractFailure(headers, props)

	m = store.NewMessage{
		MessageID:        d.MessageId,
		SourceQueue:      ShortStr(death.SourceQueue),
		SourceExchange:   ShortStr(death.SourceExchange),
		SourceRoutingKey: ShortStr(death.SourceRoutingKey),
		DeadLetterQueue:  queue,
		Reason:           death.Reason,
		DeathCount:       death.Count,
		FailureType:      fail.Type,
		FailureMessage:   fail.Message,
		Properties:       pj,
		Headers:          hj,
		Body:             d.Body,
		FirstFailedAt:    death.FirstTime,
		FailedAt:         now,
		Redelivered:      d.Redelivered,
		Returns:          Returns(d),
		HeaderValues:     headerSearchValues(headers),
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
		if fj, err := json.Marshal(fail); err == nil {
			m.Failure = fj
		}
	}
	m.DLQID, m.ReplayID, m.ReplayCount = replayMarks(d.Headers)
	m.Fingerprint = fingerprint(d, pj, hj)
	return m
}

// Returns is how many times the broker had returned d to dlq's queue before
// this delivery: 0 for a first delivery, the quorum queue's count for a
// redelivery, store.ReturnsUnknown when a redelivery carries no count
// (classic queues). RabbitMQ 3.x counts every return in x-delivery-count;
// 4.x counts only failed deliveries there and every acquisition in
// x-acquired-count, so the larger of the two is the one to trust.
func Returns(d *amqp.Delivery) int {
	if !d.Redelivered {
		return 0
	}
	n := store.ReturnsUnknown
	for _, k := range [...]string{"x-delivery-count", "x-acquired-count"} {
		v, ok := d.Headers[k]
		if !ok {
			continue
		}
		if c := toInt64(v); c > 0 && c <= math.MaxInt32 {
			n = max(n, int(c))
		}
	}
	return n
}

func isReturnCount(k string) bool { return k == "x-delivery-count" || k == "x-acquired-count" }

func hasReturnCount(h amqp.Table) bool {
	_, a := h["x-delivery-count"]
	_, b := h["x-acquired-count"]
	return a || b
}

// raw keeps what can always be kept when conversion failed.
func raw(d *amqp.Delivery, queue string, now time.Time, cause error) store.NewMessage {
	m := store.NewMessage{
		MessageID:        d.MessageId,
		DeadLetterQueue:  queue,
		Reason:           "unknown",
		Properties:       json.RawMessage(`{}`),
		Headers:          json.RawMessage(`{}`),
		Body:             d.Body,
		FirstFailedAt:    now,
		FailedAt:         now,
		Redelivered:      d.Redelivered,
		Returns:          Returns(d),
		ConversionError:  cause.Error(),
		SourceExchange:   d.Exchange,
		SourceRoutingKey: d.RoutingKey,
	}
	func() {
		defer func() { _ = recover() }()
		m.Properties = PropertiesOf(d).AppendJSON(nil)
	}()
	m.Fingerprint = fingerprint(d, m.Properties, nil)
	return m
}

// ShortStr cuts s to 255 bytes (at a character boundary), the most AMQP
// allows for a queue, exchange or routing key. The death headers are
// written by whoever published the message, and a longer value there is
// not a real name; cut, it still fits the store's indexes, and the headers
// keep it whole.
func ShortStr(s string) string {
	if len(s) <= 255 {
		return s
	}
	s = s[:255]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// undecodable keeps a delivery whose header table amqp091-go could not
// decode (framefilter.go): body and properties as always, and the table's
// AMQP encoding, byte for byte, as the one header HeaderUndecodable.
func undecodable(d *amqp.Delivery, queue string, now time.Time, table []byte) store.NewMessage {
	m := raw(d, queue, now, fmt.Errorf("the AMQP client cannot decode this message's headers "+
		"(tables or arrays nested deeper than %d levels, more than %d entries in one, or an unknown field type); "+
		"stored raw: their AMQP encoding (%d bytes) is kept, base64, in header %s", clientMaxDepth, clientMaxElements, len(table), HeaderUndecodable))
	if hj, err := AppendHeadersJSON(nil, amqp.Table{HeaderUndecodable: table}); err == nil {
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

// replayMarks reads dlq's own replay headers. Anything malformed reads as
// absent: the message is then simply a new dead message.
func replayMarks(h amqp.Table) (id int64, replayID string, count int64) {
	id = toInt64(h[HeaderID])
	if id <= 0 {
		return 0, "", 0
	}
	replayID, _ = h[HeaderReplayID].(string)
	count = toInt64(h[HeaderReplayCount])
	return id, replayID, max(count, 0)
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case int16:
		return int64(x)
	case int8:
		return int64(x)
	case int:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	case []byte:
		n, _ := strconv.ParseInt(string(x), 10, 64)
		return n
	}
	return 0
}
