package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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
	o := openObject(dst)
	str := func(name, v string) {
		if v == "" {
			return
		}
		o.key(name)
		if isSafeText(v) {
			o.buf = appendEscaped(o.buf, v)
			return
		}
		o.buf = appendEscaped(o.buf, displayText(v))
		o.buf = append(o.buf, ',', '"')
		o.buf = append(o.buf, name...)
		o.buf = append(o.buf, `_base64":"`...)
		o.buf = base64.StdEncoding.AppendEncode(o.buf, []byte(v))
		o.buf = append(o.buf, '"')
	}
	num := func(name string, v uint8) {
		if v == 0 {
			return
		}
		o.key(name)
		o.buf = strconv.AppendUint(o.buf, uint64(v), 10)
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
		o.key("timestamp")
		if y := p.Timestamp.Year(); y < 0 || y > 9999 {
			o.buf = strconv.AppendInt(o.buf, p.Timestamp.Unix(), 10)
		} else {
			o.time(*p.Timestamp)
		}
	}
	str("type", p.Type)
	str("user_id", p.UserID)
	str("app_id", p.AppID)
	return o.close()
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
	if !j.parseFast(b) {
		j = propertiesJSON{}
		if err := json.Unmarshal(b, &j); err != nil {
			return Properties{}, fmt.Errorf("broker: parse properties JSON: %w", err)
		}
	}
	return j.properties()
}

// parseFast fills j from what AppendJSON writes, without reflection: a
// replay parses every message's properties, and encoding/json took a
// tenth of dlq's CPU in a replay. It reports false, leaving j to
// encoding/json, for anything it would not read exactly as encoding/json
// does: a backslash anywhere (an escape; time's JSON parser reads a
// timestamp's quoted bytes as they are), null, a value of another type, a
// number that is not a whole uint8, and a key that is not one of the
// fields as AppendJSON spells them (encoding/json also matches keys in
// other letter cases).
func (j *propertiesJSON) parseFast(b []byte) bool {
	if bytes.IndexByte(b, '\\') >= 0 {
		return false
	}
	p := jsonParser{b: b}
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return false
	}
	var seen uint32
	ok := p.members(0, func(k string, v any) bool {
		if i, known := propertyKeyIndex[k]; known {
			if seen&(1<<i) != 0 {
				// encoding/json applies every occurrence, and fails on a
				// bad one even if a later one is good.
				return false
			}
			seen |= 1 << i
		}
		return j.setFast(k, v)
	})
	if !ok {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

// setFast sets the field of key k to v, or reports false where
// encoding/json might read it differently.
func (j *propertiesJSON) setFast(k string, v any) bool {
	switch k {
	case "delivery_mode", "priority":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		u, err := strconv.ParseUint(string(n), 10, 8)
		if err != nil {
			return false
		}
		if k == "delivery_mode" {
			j.DeliveryMode = uint8(u)
		} else {
			j.Priority = uint8(u)
		}
		return true
	case "timestamp":
		switch t := v.(type) {
		case string: // no backslash in the input: these were its bytes
			j.Timestamp = json.RawMessage(`"` + t + `"`)
		case json.Number:
			j.Timestamp = json.RawMessage(t)
		default:
			return false
		}
		return true
	}
	str, b64, known := j.stringField(k)
	if !known {
		// encoding/json ignores it too, unless it names a field in
		// other letters.
		return !isPropertyKeyFold(k)
	}
	sv, ok := v.(string)
	if !ok {
		return false
	}
	if str != nil {
		*str = sv
	} else {
		*b64 = &sv
	}
	return true
}

// textField is a text property in propertiesJSON: its plain field, and
// the *_base64 one that holds it when it is not valid text.
type textField struct {
	name  string
	plain *string
	b64   **string
}

// textFields lists the text properties, in the order of
// Properties.textFields.
func (j *propertiesJSON) textFields() [9]textField {
	return [9]textField{
		{"content_type", &j.ContentType, &j.ContentTypeB64},
		{"content_encoding", &j.ContentEncoding, &j.ContentEncodingB64},
		{"correlation_id", &j.CorrelationID, &j.CorrelationIDB64},
		{"reply_to", &j.ReplyTo, &j.ReplyToB64},
		{"expiration", &j.Expiration, &j.ExpirationB64},
		{"message_id", &j.MessageID, &j.MessageIDB64},
		{"type", &j.Type, &j.TypeB64},
		{"user_id", &j.UserID, &j.UserIDB64},
		{"app_id", &j.AppID, &j.AppIDB64},
	}
}

func (p *Properties) textFields() [9]*string {
	return [9]*string{&p.ContentType, &p.ContentEncoding, &p.CorrelationID, &p.ReplyTo, &p.Expiration,
		&p.MessageID, &p.Type, &p.UserID, &p.AppID}
}

// stringField names the field of key k: str for a plain one, b64 for a
// *_base64 one.
func (j *propertiesJSON) stringField(k string) (str *string, b64 **string, known bool) {
	name, encoded := strings.CutSuffix(k, "_base64")
	for _, f := range j.textFields() {
		if f.name == name {
			if encoded {
				return nil, f.b64, true
			}
			return f.plain, nil, true
		}
	}
	return nil, nil, false
}

// isPropertyKeyFold reports whether encoding/json would match k to a
// field of propertiesJSON (it ignores letter case).
func isPropertyKeyFold(k string) bool {
	for _, name := range propertyKeys {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// propertyKeyIndex numbers propertyKeys (at most 32).
var propertyKeyIndex = func() map[string]uint {
	m := make(map[string]uint, len(propertyKeys))
	for i, k := range propertyKeys {
		m[k] = uint(i)
	}
	return m
}()

// propertyKeys are the keys of propertiesJSON.
var propertyKeys = func() []string {
	keys := []string{"delivery_mode", "priority", "timestamp"}
	var j propertiesJSON
	for _, f := range j.textFields() {
		keys = append(keys, f.name, f.name+"_base64")
	}
	return keys
}()

// properties turns what was parsed into Properties, decoding the
// *_base64 fields and the timestamp.
func (j *propertiesJSON) properties() (Properties, error) {
	p := Properties{DeliveryMode: j.DeliveryMode, Priority: j.Priority}
	dsts := p.textFields()
	for i, f := range j.textFields() {
		*dsts[i] = *f.plain
		if *f.b64 != nil {
			raw, err := strictBase64.DecodeString(**f.b64)
			if err != nil {
				return Properties{}, fmt.Errorf("broker: parse properties JSON: %s_base64: %w", f.name, err)
			}
			*dsts[i] = string(raw)
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
