package store

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// Message statuses.
const (
	StatusPending      = "pending"
	StatusReplaying    = "replaying"
	StatusReplayed     = "replayed"
	StatusAcknowledged = "acknowledged"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []string{StatusPending, StatusReplaying, StatusReplayed, StatusAcknowledged}

// Span is the part [From, To) of a text; From == To is none.
type Span struct{ From, To int }

// Empty reports whether s covers nothing.
func (s Span) Empty() bool { return s.From >= s.To }

// storedHeaders is the headers as a row stores them: without DeathHeader.
func (m *NewMessage) storedHeaders() json.RawMessage {
	if m.DeathHeader.Empty() {
		return m.Headers
	}
	out := make(json.RawMessage, 0, len(m.Headers)-(m.DeathHeader.To-m.DeathHeader.From))
	out = append(out, m.Headers[:m.DeathHeader.From]...)
	return append(out, m.Headers[m.DeathHeader.To:]...)
}

// ReturnsUnknown is NewMessage.Returns when the broker gave no count.
const ReturnsUnknown = -1

// NewMessage is one dead message on its way in. The consumer builds it from
// a delivery; Properties and Headers hold broker.AppendHeadersJSON output.
type NewMessage struct {
	MessageID string
	// CorrelationID is the correlation_id property: a search key, as the
	// message id is (it is stored with the properties).
	CorrelationID    string
	SourceQueue      string
	SourceExchange   string
	SourceRoutingKey string
	DeadLetterQueue  string
	Reason           string
	DeathCount       int64
	// Failure is the failure detail as JSON, nil when no convention matched.
	Failure        json.RawMessage
	FailureType    string
	FailureMessage string
	Properties     json.RawMessage
	Headers        json.RawMessage
	// XDeath is the parsed x-death header as the API shows it (x_death):
	// the entries, most recent first, [] when there are none. nil leaves
	// it to be derived from Headers when the row is read (migration 00070).
	XDeath json.RawMessage
	// DeathHeader is the part of Headers the row leaves out, sealed or
	// not: the x-death member, which the operations layer rebuilds from
	// XDeath when it reads the row (broker.RestoreDeathHeader in package
	// ops), empty when Headers is stored whole. The fingerprint, search
	// values and categories see the whole Headers.
	DeathHeader   Span
	Body          []byte
	FirstFailedAt time.Time
	FailedAt      time.Time
	// Fingerprint identifies the delivery's content for redelivery matching.
	Fingerprint int64
	// ConversionError is set when the delivery could not be converted; the
	// row then holds the raw body and whatever could be salvaged.
	ConversionError string
	// Redelivered is the broker's redelivered flag.
	Redelivered bool
	// Returns is how many times the broker had returned this delivery to
	// dlq's queue before (x-delivery-count), 0 for a first delivery, and
	// ReturnsUnknown when the broker did not say (classic queues). Rows
	// keep it, so that a redelivery can be told from an identical twin.
	Returns int
	// DLQID and ReplayID come from x-dlq-id and x-dlq-replay-id: a replayed
	// message that died again. DLQID is 0 otherwise.
	DLQID       int64
	ReplayID    string
	ReplayCount int64
	// HeaderValues are the header values SearchKeys may index, when the
	// converter has them from the decoded table; nil means SearchKeys
	// derives them from Headers.
	HeaderValues []string
	// Category is the failure category the consumer computed (package
	// category); "" is unknown.
	Category string
	// ContentType and ContentEncoding are the delivery's properties of
	// those names when ContentKnown, so that the store need not parse
	// Properties again to tell a text body (BodyTextBytes); without
	// ContentKnown it does.
	ContentType, ContentEncoding string
	ContentKnown                 bool
}

// Failure categories, as package category names them (store keeps the
// words, not the rules).
const (
	CategoryTransient = "transient"
	CategoryPermanent = "permanent"
	CategoryUnknown   = "unknown"
)

// Categories lists every failure category.
var Categories = []string{CategoryTransient, CategoryPermanent, CategoryUnknown}

// Death reasons, as the consumer stores them (broker.ExtractDeath
// normalizes RabbitMQ's names to these; anything else is unknown).
const (
	ReasonRejected      = "rejected"
	ReasonExpired       = "expired"
	ReasonMaxLen        = "maxlen"
	ReasonDeliveryLimit = "delivery_limit"
	ReasonUnknown       = "unknown"
)

// Reasons lists every death reason a filter may select.
var Reasons = []string{ReasonRejected, ReasonExpired, ReasonMaxLen, ReasonDeliveryLimit, ReasonUnknown}

// categoryOf is the stored form of a category: "" is unknown.
func categoryOf(c string) string {
	if c == "" {
		return CategoryUnknown
	}
	return c
}

// cleanText makes s storable in a text column: PostgreSQL rejects NUL and
// invalid UTF-8. The exact value is kept in the JSON columns.
func cleanText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// nullText maps "" to SQL NULL.
func nullText(s string) *string {
	if s == "" {
		return nil
	}
	s = cleanText(s)
	return &s
}
