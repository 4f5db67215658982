package broker

import (
	"math"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
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

// ReturnCount is how many times the broker had returned d to dlq's queue
// before this delivery: 0 for a first delivery, the quorum queue's count
// for a redelivery; known is false when a redelivery carries no count
// (classic queues). RabbitMQ 3.x counts every return in x-delivery-count;
// 4.x counts only failed deliveries there and every acquisition in
// x-acquired-count, so the larger of the two is the one to trust.
func ReturnCount(d *amqp.Delivery) (n int, known bool) {
	if !d.Redelivered {
		return 0, true
	}
	for _, k := range [...]string{"x-delivery-count", "x-acquired-count"} {
		v, ok := d.Headers[k]
		if !ok {
			continue
		}
		if c := HeaderInt(v); c > 0 && c <= math.MaxInt32 {
			n, known = max(n, int(c)), true
		}
	}
	return n, known
}

// WithoutReturnCounts returns h without the return counts dlq's own quorum
// queue adds on redelivery (x-delivery-count, x-acquired-count): they
// describe this delivery, not the message, and would make a redelivery look
// different from the first delivery. h itself is returned when it has none.
func WithoutReturnCounts(h amqp.Table) amqp.Table {
	if !hasReturnCount(h) {
		return h
	}
	out := make(amqp.Table, len(h))
	for k, v := range h {
		if !isReturnCount(k) {
			out[k] = v
		}
	}
	return out
}

func isReturnCount(k string) bool { return k == "x-delivery-count" || k == "x-acquired-count" }

func hasReturnCount(h amqp.Table) bool {
	_, a := h["x-delivery-count"]
	_, b := h["x-acquired-count"]
	return a || b
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

// ReplayMarks reads dlq's own replay headers: the record a replayed message
// came from (0 when none), the replay that published it and how often it
// was replayed. Anything malformed reads as absent: the message is then
// simply a new dead message. A count past what the row's replay_count
// holds (int4) is malformed too: stored, it would fail its whole batch at
// every attempt, and no replay counts that far.
func ReplayMarks(h amqp.Table) (id int64, replayID string, count int64) {
	id = HeaderInt(h[HeaderID])
	if id <= 0 {
		return 0, "", 0
	}
	replayID, _ = h[HeaderReplayID].(string)
	count = HeaderInt(h[HeaderReplayCount])
	if count < 0 || count > math.MaxInt32 {
		count = 0
	}
	return id, replayID, count
}

// IsReturnCount reports whether k is one of the return counts a quorum
// queue adds on redelivery (ReturnCount, WithoutReturnCounts).
func IsReturnCount(k string) bool { return isReturnCount(k) }

// IsExtractedHeader reports whether ExtractFailure or ReplayMarks may
// read header k: a table holding only these keys gives them the same
// results as the whole table (ingest decodes just these from a RawTable,
// and reads the death headers with ExtractDeathRaw). Keep it in step with
// those functions.
func IsExtractedHeader(k string) bool {
	switch k {
	case HeaderID, HeaderReplayID, HeaderReplayCount:
		return true
	}
	return IsFailureHeader(k)
}
