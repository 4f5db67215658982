package broker

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Properties holds every AMQP basic property of a message except headers,
// which are stored separately (see AppendHeadersJSON).
//
// AMQP short strings are arbitrary bytes. A property that is not valid UTF-8
// or contains NUL cannot be a JSON string without loss (and PostgreSQL jsonb
// refuses \u0000), so AppendJSON writes it twice: the usual field with
// invalid bytes and NUL replaced by U+FFFD, for people and queries, and
// "<field>_base64" with the exact bytes, which ParsePropertiesJSON prefers.
type Properties struct {
	ContentType     string     `json:"content_type,omitempty"`
	ContentEncoding string     `json:"content_encoding,omitempty"`
	DeliveryMode    uint8      `json:"delivery_mode,omitempty"`
	Priority        uint8      `json:"priority,omitempty"`
	CorrelationID   string     `json:"correlation_id,omitempty"`
	ReplyTo         string     `json:"reply_to,omitempty"`
	Expiration      string     `json:"expiration,omitempty"`
	MessageID       string     `json:"message_id,omitempty"`
	Timestamp       *time.Time `json:"timestamp,omitempty"` // nil when the publisher set none
	Type            string     `json:"type,omitempty"`
	UserID          string     `json:"user_id,omitempty"`
	AppID           string     `json:"app_id,omitempty"`
}

// PropertiesOf copies the basic properties of a delivery. A timestamp the
// publisher did not set (the zero time.Time the AMQP reader leaves) becomes
// nil; a set one is converted to UTC. A timestamp of 0 (1970-01-01) that a
// publisher did send is kept.
func PropertiesOf(d *amqp.Delivery) Properties {
	p := Properties{
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationID:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageID:       d.MessageId,
		Type:            d.Type,
		UserID:          d.UserId,
		AppID:           d.AppId,
	}
	if !d.Timestamp.IsZero() {
		ts := d.Timestamp.UTC()
		p.Timestamp = &ts
	}
	return p
}

// Publishing returns a Publishing carrying these properties, without headers
// or body, for replay.
func (p Properties) Publishing() amqp.Publishing {
	pub := amqp.Publishing{
		ContentType:     p.ContentType,
		ContentEncoding: p.ContentEncoding,
		DeliveryMode:    p.DeliveryMode,
		Priority:        p.Priority,
		CorrelationId:   p.CorrelationID,
		ReplyTo:         p.ReplyTo,
		Expiration:      p.Expiration,
		MessageId:       p.MessageID,
		Type:            p.Type,
		UserId:          p.UserID,
		AppId:           p.AppID,
	}
	if p.Timestamp != nil {
		pub.Timestamp = *p.Timestamp
	}
	return pub
}

// AppendJSON appends p as a JSON object. For valid text it is byte-for-byte
// what encoding/json.Marshal gives; it differs only where encoding/json would
// lose data or fail: the "<field>_base64" fields described on Properties, and
// a timestamp outside the years 0000–9999, written as a number of Unix
// seconds instead of an error.
func (p Properties) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	first := true
	str := func(name, v string) {
		if v == "" {
			return
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		if isSafeText(v) {
			dst = appendEscaped(dst, v)
			return
		}
		dst = appendEscaped(dst, displayText(v))
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		dst = append(dst, `_base64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, []byte(v))
		dst = append(dst, '"')
	}
	num := func(name string, v uint8) {
		if v == 0 {
			return
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		dst = strconv.AppendUint(dst, uint64(v), 10)
	}
	str("content_type", p.ContentType)
	str("content_encoding", p.ContentEncoding)
	num("delivery_mode", p.DeliveryMode)
	num("priority", p.Priority)
	str("correlation_id", p.CorrelationID)
	str("reply_to", p.ReplyTo)
	str("expiration", p.Expiration)
	str("message_id", p.MessageID)
	if p.Timestamp != nil {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, `"timestamp":`...)
		if y := p.Timestamp.Year(); y < 0 || y > 9999 {
			dst = strconv.AppendInt(dst, p.Timestamp.Unix(), 10)
		} else {
			dst = append(dst, '"')
			dst = p.Timestamp.AppendFormat(dst, time.RFC3339Nano)
			dst = append(dst, '"')
		}
	}
	str("type", p.Type)
	str("user_id", p.UserID)
	str("app_id", p.AppID)
	return append(dst, '}')
}

// displayText makes s safe for a JSON string column: invalid UTF-8 and NUL
// become U+FFFD. It is lossy; the exact bytes live elsewhere.
func displayText(s string) string {
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:]) // RuneError for invalid bytes
		if r == 0 {
			r = utf8.RuneError
		}
		b = utf8.AppendRune(b, r)
		i += size
	}
	return string(b)
}

// propertiesJSON mirrors the JSON of Properties, plus the *_base64 fields
// and a timestamp that may be a string or a number.
type propertiesJSON struct {
	ContentType        string          `json:"content_type"`
	ContentTypeB64     *string         `json:"content_type_base64"`
	ContentEncoding    string          `json:"content_encoding"`
	ContentEncodingB64 *string         `json:"content_encoding_base64"`
	DeliveryMode       uint8           `json:"delivery_mode"`
	Priority           uint8           `json:"priority"`
	CorrelationID      string          `json:"correlation_id"`
	CorrelationIDB64   *string         `json:"correlation_id_base64"`
	ReplyTo            string          `json:"reply_to"`
	ReplyToB64         *string         `json:"reply_to_base64"`
	Expiration         string          `json:"expiration"`
	ExpirationB64      *string         `json:"expiration_base64"`
	MessageID          string          `json:"message_id"`
	MessageIDB64       *string         `json:"message_id_base64"`
	Timestamp          json.RawMessage `json:"timestamp"`
	Type               string          `json:"type"`
	TypeB64            *string         `json:"type_base64"`
	UserID             string          `json:"user_id"`
	UserIDB64          *string         `json:"user_id_base64"`
	AppID              string          `json:"app_id"`
	AppIDB64           *string         `json:"app_id_base64"`
}

// ParsePropertiesJSON is the inverse of AppendJSON. It also reads what
// encoding/json.Marshal writes, and ignores fields it does not know.
func ParsePropertiesJSON(b []byte) (Properties, error) {
	var j propertiesJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Properties{}, fmt.Errorf("broker: parse properties JSON: %w", err)
	}
	p := Properties{DeliveryMode: j.DeliveryMode, Priority: j.Priority}
	for _, f := range []struct {
		dst   *string
		plain string
		b64   *string
		name  string
	}{
		{&p.ContentType, j.ContentType, j.ContentTypeB64, "content_type"},
		{&p.ContentEncoding, j.ContentEncoding, j.ContentEncodingB64, "content_encoding"},
		{&p.CorrelationID, j.CorrelationID, j.CorrelationIDB64, "correlation_id"},
		{&p.ReplyTo, j.ReplyTo, j.ReplyToB64, "reply_to"},
		{&p.Expiration, j.Expiration, j.ExpirationB64, "expiration"},
		{&p.MessageID, j.MessageID, j.MessageIDB64, "message_id"},
		{&p.Type, j.Type, j.TypeB64, "type"},
		{&p.UserID, j.UserID, j.UserIDB64, "user_id"},
		{&p.AppID, j.AppID, j.AppIDB64, "app_id"},
	} {
		*f.dst = f.plain
		if f.b64 != nil {
			raw, err := strictBase64.DecodeString(*f.b64)
			if err != nil {
				return Properties{}, fmt.Errorf("broker: parse properties JSON: %s_base64: %w", f.name, err)
			}
			*f.dst = string(raw)
		}
	}
	if len(j.Timestamp) > 0 && string(j.Timestamp) != "null" {
		ts, err := parsePropertyTimestamp(j.Timestamp)
		if err != nil {
			return Properties{}, fmt.Errorf("broker: parse properties JSON: timestamp %s: %w", j.Timestamp, err)
		}
		p.Timestamp = &ts
	}
	return p, nil
}

func parsePropertyTimestamp(raw json.RawMessage) (time.Time, error) {
	if raw[0] == '"' {
		var t time.Time
		if err := t.UnmarshalJSON(raw); err != nil {
			return time.Time{}, err
		}
		return t.UTC(), nil
	}
	sec, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("want an RFC 3339 string or whole Unix seconds")
	}
	return time.Unix(sec, 0).UTC(), nil
}
