package broker

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// checkPropertiesFast: whatever the fast path accepts, encoding/json
// reads the same way.
func checkPropertiesFast(t *testing.T, b []byte) {
	var fast propertiesJSON
	if !fast.parseFast(b) {
		return
	}
	var slow propertiesJSON
	if err := json.Unmarshal(b, &slow); err != nil {
		t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", b, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("fast path read %q as\n%+v\nencoding/json as\n%+v", b, fast, slow)
	}
}

func propertiesSeeds() []string {
	ts := time.Date(2026, 11, 25, 8, 0, 0, 123456789, time.UTC)
	far := time.Unix(-99999999999, 0)
	seeds := []string{
		`{}`, `{"priority":0}`, `{"priority":255}`, `{"priority":256}`, `{"priority":-1}`, `{"priority":1.0}`,
		`{"priority":1e0}`, `{"delivery_mode":2,"delivery_mode":2}`, `{"priority":"x","priority":1}`,
		`{"Content_Type":"a"}`, `{"content_type":"a","CONTENT_TYPE":"b"}`, `{"content_type":null}`,
		`{"content_type":"a\u0062"}`, `{"timestamp":"2026-11-25T08:00:00Z"}`, `{"timestamp":"garbage"}`,
		`{"timestamp":1764057600}`, `{"timestamp":1.5}`, `{"timestamp":null}`, `{"unknown":{"a":[1,2]}}`,
		`{"message_id_base64":"AAE="}`, `{"message_id_base64":"not base64"}`, `{"ſ":1}`, `{"type":"K"}`,
		` {"app_id" : "x" } `, `{"app_id":"x"} trailing`, `[]`, `"str"`, `{"user_id":5}`,
	}
	for _, p := range []Properties{
		{},
		{ContentType: "application/json", DeliveryMode: 2, Priority: 9, CorrelationID: "c-1", ReplyTo: "amq.rabbitmq.reply-to",
			Expiration: "60000", MessageID: "m-1", Timestamp: &ts, Type: "order.created", UserID: "guest", AppID: "shop"},
		{MessageID: "\x00\xff bytes", Timestamp: &far, ContentEncoding: "gzip"},
	} {
		seeds = append(seeds, string(p.AppendJSON(nil)))
	}
	return seeds
}

func TestPropertiesFastPathMatchesEncodingJSON(t *testing.T) {
	for _, s := range propertiesSeeds() {
		checkPropertiesFast(t, []byte(s))
	}
	// What dlq itself writes never needs the slow path, but for bytes
	// that are not text.
	ts := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	b := Properties{ContentType: "text/plain", DeliveryMode: 2, MessageID: "m-9", Timestamp: &ts}.AppendJSON(nil)
	var j propertiesJSON
	if !j.parseFast(b) {
		t.Fatalf("the fast path fell back on %s, which dlq writes itself", b)
	}
}

func FuzzParsePropertiesJSON(f *testing.F) {
	for _, s := range propertiesSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(checkPropertiesFast)
}
