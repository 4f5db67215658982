package replay

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// buildPublishing rebuilds the message as the application sent it: the
// same body and properties, the application headers with their AMQP types
// (DecodeHeadersJSON is lossless), without the broker's death headers,
// plus dlq's replay headers. replay_count+1 is the number this publish
// will have once confirmed; with x-dlq-id it names the replay attempt, so
// two copies of one attempt (an unknown outcome replayed again by an
// operator) carry the same pair while x-dlq-replay-id differs per publish.
//
// user_id is dropped unless keepUserID: RabbitMQ refuses a publish whose
// user_id is not the publishing connection's user with PRECONDITION_FAILED,
// which closes the channel and ends every other publish in flight on it
// as unknown. A message an application published as "billing" would
// otherwise poison the replay of everything around it when dlq connects as
// another user.
func buildPublishing(m store.ClaimedMessage, replayID string, keepUserID bool) (amqp.Publishing, error) {
	props, err := broker.ParsePropertiesJSON(m.Properties)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("stored properties of message %d: %w", m.ID, err)
	}
	h, err := broker.DecodeHeadersJSON(m.Headers)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("stored headers of message %d: %w", m.ID, err)
	}
	if h == nil {
		h = amqp.Table{}
	}
	for k := range h {
		if isDeathHeader(k) {
			delete(h, k)
		}
	}
	h[broker.HeaderID] = m.ID
	h[broker.HeaderReplayCount] = m.ReplayCount + 1
	h[broker.HeaderReplayID] = replayID
	pub := props.Publishing()
	if !keepUserID {
		pub.UserId = ""
	}
	pub.Headers = h
	pub.Body = m.Body
	return pub, nil
}

// isDeathHeader reports whether RabbitMQ set header k when it
// dead-lettered or redelivered the message. RabbitMQ has added to the
// x-first-death-* and x-last-death-* families over versions (reason,
// queue, exchange so far), and quorum queues count deliveries in
// x-delivery-count (x-acquired-count from 4.0 on), so the families are
// matched by prefix: a republished one would make the broker's own
// accounting of the new message wrong.
func isDeathHeader(k string) bool {
	switch k {
	case "x-death", "x-delivery-count", "x-acquired-count":
		return true
	}
	return strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") || broker.IsBrokerHeader(k)
}

// target is where a message goes: the task's override, or the exchange and
// routing key it was first published with (a message sent through the
// default exchange has exchange "" and its queue as routing key, so it goes
// straight back to that queue).
func target(t store.ReplayTask, m store.ClaimedMessage) (exchange, key string) {
	if t.TargetExchange != nil {
		key := ""
		if t.TargetRoutingKey != nil {
			key = *t.TargetRoutingKey
		}
		return *t.TargetExchange, key
	}
	return m.SourceExchange, m.SourceRoutingKey
}

// newReplayID returns a random (version 4) UUID, unique per publish.
func newReplayID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	// By hand rather than fmt: one of these per published message.
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}
