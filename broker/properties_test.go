package broker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

func fullDelivery() *amqp.Delivery {
	return &amqp.Delivery{
		Headers:         amqp.Table{"a": "b"},
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		DeliveryMode:    amqp.Persistent,
		Priority:        9,
		CorrelationId:   "c0ffee",
		ReplyTo:         "amq.rabbitmq.reply-to",
		Expiration:      "60000",
		MessageId:       "msg-1",
		Timestamp:       time.Unix(1709647629, 0), // local zone, as the reader gives it
		Type:            "order.created",
		UserId:          "guest",
		AppId:           "orders-service",
		Exchange:        "dlx",
		RoutingKey:      "orders",
		Body:            []byte("{}"),
	}
}

func TestPropertiesOf(t *testing.T) {
	t.Parallel()
	p := PropertiesOf(fullDelivery())
	at := time.Date(2024, 3, 5, 14, 7, 9, 0, time.UTC)
	require.Equal(t, Properties{
		ContentType:     "application/json",
		ContentEncoding: "gzip",
		DeliveryMode:    2,
		Priority:        9,
		CorrelationID:   "c0ffee",
		ReplyTo:         "amq.rabbitmq.reply-to",
		Expiration:      "60000",
		MessageID:       "msg-1",
		Timestamp:       &at,
		Type:            "order.created",
		UserID:          "guest",
		AppID:           "orders-service",
	}, p)

	t.Run("no timestamp is nil", func(t *testing.T) {
		t.Parallel()
		require.Nil(t, PropertiesOf(&amqp.Delivery{}).Timestamp)
	})
	t.Run("epoch a publisher sent is kept", func(t *testing.T) {
		t.Parallel()
		p := PropertiesOf(&amqp.Delivery{Timestamp: time.Unix(0, 0)})
		require.NotNil(t, p.Timestamp)
		require.Equal(t, int64(0), p.Timestamp.Unix())
	})
}

func TestPropertiesPublishing(t *testing.T) {
	t.Parallel()
	d := fullDelivery()
	pub := PropertiesOf(d).Publishing()
	require.Equal(t, amqp.Publishing{
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp.UTC(),
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
	}, pub)
	require.True(t, pub.Timestamp.Equal(d.Timestamp))

	require.True(t, Properties{}.Publishing().Timestamp.IsZero(), "no timestamp: the AMQP writer leaves it out")
}

// For valid text, AppendJSON is exactly encoding/json's output.
func TestPropertiesAppendJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	nanos := time.Date(2024, 3, 5, 14, 7, 9, 123456789, time.UTC)
	zoned := time.Date(2024, 3, 5, 15, 7, 9, 0, time.FixedZone("", 3600))
	tests := map[string]Properties{
		"empty":   {},
		"full":    PropertiesOf(fullDelivery()),
		"escapes": {ContentType: `text/plain; charset="utf-8"`, MessageID: "<id>&\n\t\x01\u2028", Type: "ünïcödé 🎉", AppID: `back\slash`},
		"numbers": {DeliveryMode: 1, Priority: 255},
		"nanos":   {Timestamp: &nanos},
		"zoned":   {Timestamp: &zoned},
		"one":     {UserID: "u"},
	}
	for name, p := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := json.Marshal(p)
			require.NoError(t, err)
			got := p.AppendJSON(nil)
			require.Equal(t, string(want), string(got))

			back, err := ParsePropertiesJSON(got)
			require.NoError(t, err)
			if p.Timestamp != nil {
				require.True(t, p.Timestamp.Equal(*back.Timestamp))
				back.Timestamp = p.Timestamp
			}
			require.Equal(t, p, back)
		})
	}
}

func TestPropertiesNonUTF8(t *testing.T) {
	t.Parallel()
	p := Properties{
		MessageID:     "id-\xff\xfe",
		CorrelationID: "a\x00b",
		ContentType:   "text/plain",
	}
	got := p.AppendJSON(nil)
	// The readable field carries U+FFFD itself, as encoding/json writes it.
	want := `{"content_type":"text/plain","correlation_id":"a\ufffdb","correlation_id_base64":"YQBi","message_id":"id-\ufffd\ufffd","message_id_base64":"aWQt//4="}`
	require.Equal(t, strings.ReplaceAll(want, `\ufffd`, "\uFFFD"), string(got))
	require.True(t, json.Valid(got))
	require.NotContains(t, string(got), `\u0000`)

	back, err := ParsePropertiesJSON(got)
	require.NoError(t, err)
	require.Equal(t, p, back, "the _base64 fields restore the exact bytes")
}

func TestPropertiesTimestampOutOfRange(t *testing.T) {
	t.Parallel()
	// A publisher that puts milliseconds into the seconds field.
	far := time.Unix(1709647629000, 0).UTC()
	p := Properties{Timestamp: &far}
	got := p.AppendJSON(nil)
	require.Equal(t, `{"timestamp":1709647629000}`, string(got))
	_, err := json.Marshal(p)
	require.Error(t, err, "encoding/json cannot write this time at all")

	back, err := ParsePropertiesJSON(got)
	require.NoError(t, err)
	require.Equal(t, far.Unix(), back.Timestamp.Unix())
}

func TestParsePropertiesJSON(t *testing.T) {
	t.Parallel()
	// As PostgreSQL jsonb gives it back: spaces, keys reordered.
	in := `{"type": "t", "app_id": "a", "priority": 3, "timestamp": "2024-03-05T15:07:09+01:00", "unknown_field": [1], "delivery_mode": 2}`
	p, err := ParsePropertiesJSON([]byte(in))
	require.NoError(t, err)
	at := time.Date(2024, 3, 5, 14, 7, 9, 0, time.UTC)
	require.Equal(t, Properties{Type: "t", AppID: "a", Priority: 3, DeliveryMode: 2, Timestamp: &at}, p)

	p, err = ParsePropertiesJSON([]byte(`{"timestamp":null}`))
	require.NoError(t, err)
	require.Nil(t, p.Timestamp)

	for _, tt := range []struct{ in, want string }{
		{`[]`, "broker: parse properties JSON: json: cannot unmarshal array"},
		{`{"delivery_mode":256}`, "broker: parse properties JSON: json: cannot unmarshal number 256"},
		{`{"message_id_base64":"%%"}`, "broker: parse properties JSON: message_id_base64: illegal base64 data"},
		{`{"timestamp":"yesterday"}`, `broker: parse properties JSON: timestamp "yesterday": parsing time`},
		{`{"timestamp":1.5}`, "broker: parse properties JSON: timestamp 1.5: want an RFC 3339 string or whole Unix seconds"},
	} {
		_, err := ParsePropertiesJSON([]byte(tt.in))
		require.ErrorContains(t, err, tt.want, tt.in)
	}
}

func TestPropertiesDeliveryRoundTrip(t *testing.T) {
	t.Parallel()
	// Delivery -> stored JSON -> Publishing keeps every property.
	d := fullDelivery()
	d.MessageId = "binary\x00\xff id"
	p, err := ParsePropertiesJSON(PropertiesOf(d).AppendJSON(nil))
	require.NoError(t, err)
	pub := p.Publishing()
	require.Equal(t, d.MessageId, pub.MessageId)
	require.Equal(t, d.Timestamp.Unix(), pub.Timestamp.Unix())
	require.Equal(t, d.Priority, pub.Priority)
	require.Equal(t, d.Expiration, pub.Expiration)
}

func TestDisplayText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\uFFFDb\uFFFD\uFFFDü", displayText("a\x00b\xff\xfeü"))
	require.Equal(t, strings.Repeat("\uFFFD", 3), displayText("\xed\xa0\x80"), "a surrogate half is three bad bytes")
}

func BenchmarkPropertiesAppendJSON(b *testing.B) {
	p := PropertiesOf(fullDelivery())
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = p.AppendJSON(buf[:0])
	}
}
