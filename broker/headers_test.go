package broker

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite golden files in testdata/")

// decodeValueJSON decodes one value written by AppendValueJSON.
func decodeValueJSON(b []byte) (any, error) {
	raw, err := parseJSON(b)
	if err != nil {
		return nil, err
	}
	return decodeValue(raw, 0)
}

// sameValue is reflect.DeepEqual that also holds NaN equal to NaN (AMQP
// floats may be NaN; DeepEqual says NaN != NaN).
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y && math.Signbit(x) == math.Signbit(y) || math.IsNaN(x) && math.IsNaN(y))
	case float32:
		y, ok := b.(float32)
		return ok && (x == y && math.Signbit(float64(x)) == math.Signbit(float64(y)) || x != x && y != y)
	case amqp.Table:
		y, ok := b.(amqp.Table)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	}
	return reflect.DeepEqual(a, b)
}

// ts is a timestamp as the AMQP reader delivers it.
func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return time.Unix(t.Unix(), 0)
}

// realisticHeaders is what RabbitMQ 3.13 hands over for a message that was
// rejected three times from orders.created after expiring once from a retry
// queue, plus typical application headers.
func realisticHeaders() amqp.Table {
	return amqp.Table{
		"x-death": []any{
			amqp.Table{
				"count":        int64(3),
				"exchange":     "orders",
				"queue":        "orders.created",
				"reason":       "rejected",
				"routing-keys": []any{"order.created.eu"},
				"time":         ts("2024-03-05T14:07:09Z"),
			},
			amqp.Table{
				"count":               int64(1),
				"exchange":            "",
				"queue":               "orders.retry",
				"reason":              "expired",
				"routing-keys":        []any{"orders.retry"},
				"time":                ts("2024-03-05T14:06:39Z"),
				"original-expiration": "30000",
			},
		},
		"x-first-death-exchange": "",
		"x-first-death-queue":    "orders.retry",
		"x-first-death-reason":   "expired",
		"x-last-death-exchange":  "orders",
		"x-last-death-queue":     "orders.created",
		"x-last-death-reason":    "rejected",
		"traceparent":            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"x-tenant-id":            int32(4711),
		"x-attempt":              int64(3),
		"x-signature":            []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0x01},
		"x-score":                0.75,
	}
}

func TestAppendValueJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"nil", nil, `null`},
		{"true", true, `true`},
		{"false", false, `false`},
		{"empty string", "", `""`},
		{"ascii", "hello", `"hello"`},
		{"json specials", "a\"b\\c\n\r\t\b\f\x01\x1f/", `"a\"b\\c\n\r\t\b\f\u0001\u001f/"`},
		{"html escaped like encoding/json", "<a>&", `"\u003ca\u003e\u0026"`},
		{"unicode", "grüße 日本 🎉", `"grüße 日本 🎉"`},
		{"line separators", "a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"DEL is plain", "\x7f", "\"\x7f\""},
		{"invalid utf-8", "ab\xffc", `{"type":"string","encoding":"base64","value":"YWL/Yw=="}`},
		{"NUL", "a\x00b", `{"type":"string","encoding":"base64","value":"YQBi"}`},
		{"surrogate half as utf-8", "\xed\xa0\x80", `{"type":"string","encoding":"base64","value":"7aCA"}`},
		{"int8 min", int8(math.MinInt8), `{"type":"int8","value":-128}`},
		{"int8 max", int8(math.MaxInt8), `{"type":"int8","value":127}`},
		{"int16 min", int16(math.MinInt16), `{"type":"int16","value":-32768}`},
		{"int16 max", int16(math.MaxInt16), `{"type":"int16","value":32767}`},
		{"int32 min", int32(math.MinInt32), `{"type":"int32","value":-2147483648}`},
		{"int32 max", int32(math.MaxInt32), `{"type":"int32","value":2147483647}`},
		{"int64 min", int64(math.MinInt64), `{"type":"int64","value":-9223372036854775808}`},
		{"int64 max", int64(math.MaxInt64), `{"type":"int64","value":9223372036854775807}`},
		{"int64 beyond 2^53", int64(1<<53 + 1), `{"type":"int64","value":9007199254740993}`},
		{"uint8 max", uint8(math.MaxUint8), `{"type":"uint8","value":255}`},
		{"uint16 max", uint16(math.MaxUint16), `{"type":"uint16","value":65535}`},
		{"uint32 max", uint32(math.MaxUint32), `{"type":"uint32","value":4294967295}`},
		{"uint zero", uint16(0), `{"type":"uint16","value":0}`},
		{"float32", float32(1.1), `{"type":"float32","value":1.1}`},
		{"float32 max", float32(math.MaxFloat32), `{"type":"float32","value":3.4028235e+38}`},
		{"float32 tiny", float32(math.SmallestNonzeroFloat32), `{"type":"float32","value":1e-45}`},
		{"float64", 0.1, `{"type":"float64","value":0.1}`},
		{"float64 integral", 1e6, `{"type":"float64","value":1000000}`},
		{"float64 large", 1e21, `{"type":"float64","value":1e+21}`},
		{"float64 small", 1e-7, `{"type":"float64","value":1e-7}`},
		{"float64 max", math.MaxFloat64, `{"type":"float64","value":1.7976931348623157e+308}`},
		{"float64 negative zero", math.Copysign(0, -1), `{"type":"float64","value":-0}`},
		{"float64 NaN", math.NaN(), `{"type":"float64","value":"NaN"}`},
		{"float64 +Inf", math.Inf(1), `{"type":"float64","value":"+Inf"}`},
		{"float64 -Inf", math.Inf(-1), `{"type":"float64","value":"-Inf"}`},
		{"float32 NaN", float32(math.NaN()), `{"type":"float32","value":"NaN"}`},
		{"float32 -Inf", float32(math.Inf(-1)), `{"type":"float32","value":"-Inf"}`},
		{"decimal", amqp.Decimal{Scale: 2, Value: -12345}, `{"type":"decimal","value":{"scale":2,"value":-12345}}`},
		{"decimal extremes", amqp.Decimal{Scale: 255, Value: math.MinInt32}, `{"type":"decimal","value":{"scale":255,"value":-2147483648}}`},
		{"timestamp", ts("2024-03-05T14:07:09Z"), `{"type":"timestamp","value":"2024-03-05T14:07:09Z"}`},
		{"timestamp epoch", time.Unix(0, 0), `{"type":"timestamp","value":"1970-01-01T00:00:00Z"}`},
		{"timestamp year 0", time.Unix(minRFC3339Unix, 0), `{"type":"timestamp","value":"0000-01-01T00:00:00Z"}`},
		{"timestamp year 9999", time.Unix(maxRFC3339Unix, 0), `{"type":"timestamp","value":"9999-12-31T23:59:59Z"}`},
		{"timestamp beyond 9999 as seconds", time.Unix(maxRFC3339Unix+1, 0), `{"type":"timestamp","value":253402300800}`},
		{"timestamp in milliseconds by mistake", time.Unix(1709647629000, 0), `{"type":"timestamp","value":1709647629000}`},
		{"timestamp before year 0", time.Unix(minRFC3339Unix-1, 0), `{"type":"timestamp","value":-62167219201}`},
		{"timestamp max int64", time.Unix(math.MaxInt64, 0), `{"type":"timestamp","value":9223372036854775807}`},
		{"bytes", []byte("hi\x00\xff"), `{"type":"bytes","value":"aGkA/w=="}`},
		{"empty bytes", []byte{}, `{"type":"bytes","value":""}`},
		{"empty array", []any{}, `[]`},
		{"empty table", amqp.Table{}, `{}`},
		{"array of mixed", []any{"a", int8(1), nil, true, []any{}}, `["a",{"type":"int8","value":1},null,true,[]]`},
		{"table sorted keys", amqp.Table{"b": "2", "a": "1", "B": "0", "": "e"}, `{"":"e","B":"0","a":"1","b":"2"}`},
		{
			"nested tables in arrays in tables",
			amqp.Table{"outer": []any{amqp.Table{"inner": []any{amqp.Table{"deep": int16(7)}}}}},
			`{"outer":[{"inner":[{"deep":{"type":"int16","value":7}}]}]}`,
		},
		{"table looking typed", amqp.Table{"type": "bytes", "value": "aGk="}, `{"type":"table","value":{"type":"bytes","value":"aGk="}}`},
		{"table with only type", amqp.Table{"type": "order"}, `{"type":"table","value":{"type":"order"}}`},
		{"table with type and more is plain", amqp.Table{"type": "order", "id": "1"}, `{"id":"1","type":"order"}`},
		{"table with value but no type is plain", amqp.Table{"value": int8(1)}, `{"value":{"type":"int8","value":1}}`},
		{"table with invalid key", amqp.Table{"ok": "1", "b\xffd": "2"}, `{"type":"table","encoding":"base64","value":{"Yv9k":"2","b2s=":"1"}}`},
		{"table with NUL key", amqp.Table{"a\x00": true}, `{"type":"table","encoding":"base64","value":{"YQA=":true}}`},
		{"escaped key", amqp.Table{"a\"<b>\n": int8(1)}, `{"a\"\u003cb\u003e\n":{"type":"int8","value":1}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := AppendValueJSON(nil, tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
			require.True(t, json.Valid(got), "output must be valid JSON")
			require.NotContains(t, string(got), `\u0000`, "PostgreSQL jsonb refuses \\u0000")

			back, err := decodeValueJSON(got)
			require.NoError(t, err)
			require.True(t, sameValue(tt.in, back), "round trip: got %#v, want %#v", back, tt.in)
		})
	}
}

func TestAppendValueJSONNormalises(t *testing.T) {
	t.Parallel()
	// Values that do not come back identical, because AMQP cannot tell them
	// apart either: Go int is written as int64 by this encoding, a time
	// loses its zone and sub-second part, nil tables and byte slices become
	// empty ones.
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"int", int(-5), int64(-5)},
		{"time in another zone with nanoseconds", time.Date(2024, 3, 5, 15, 7, 9, 999_999_999, time.FixedZone("CET", 3600)), ts("2024-03-05T14:07:09Z")},
		{"time before 1970 with fraction floors", time.Unix(-1, 500_000_000), time.Unix(-1, 0)},
		{"nil table", amqp.Table(nil), amqp.Table{}},
		{"nil bytes", []byte(nil), []byte{}},
		{"nil array", []any(nil), []any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := AppendValueJSON(nil, tt.in)
			require.NoError(t, err)
			back, err := decodeValueJSON(got)
			require.NoError(t, err)
			require.Equal(t, tt.want, back)
		})
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	tables := map[string]amqp.Table{
		"realistic":  realisticHeaders(),
		"empty":      {},
		"big bytes":  {"blob": big, "text": strings.Repeat("ä\x00", 1<<16)},
		"nil values": {"a": nil, "b": []any{nil, amqp.Table{"c": nil}}},
		"every type": {
			"s": "x", "b": true, "i8": int8(-1), "i16": int16(-2), "i32": int32(-3), "i64": int64(-4),
			"u8": uint8(5), "u16": uint16(6), "u32": uint32(7), "f32": float32(-0.5), "f64": 2.5,
			"d": amqp.Decimal{Scale: 3, Value: 1234}, "t": ts("1999-12-31T23:59:59Z"), "x": []byte{1, 2},
			"a": []any{}, "tab": amqp.Table{}, "nil": nil,
		},
		"tricky keys": {
			"type": "t", "value": "v", "encoding": "base64", // looks typed: must be wrapped
			"nested": amqp.Table{"type": "string", "encoding": "base64", "value": "AA=="},
			"bad":    amqp.Table{"\xff": amqp.Table{"type": int8(1)}},
		},
	}
	for name, tab := range tables {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			enc, err := AppendHeadersJSON(nil, tab)
			require.NoError(t, err)
			require.True(t, json.Valid(enc))
			dec, err := DecodeHeadersJSON(enc)
			require.NoError(t, err)
			require.Equal(t, tab, dec)
		})
	}
}

func TestAppendHeadersJSONGolden(t *testing.T) {
	t.Parallel()
	got, err := AppendHeadersJSON(nil, realisticHeaders())
	require.NoError(t, err)
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, got, "", "  "))
	pretty.WriteByte('\n')
	path := filepath.Join("testdata", "realistic_headers.json")
	if *updateGolden {
		require.NoError(t, os.WriteFile(path, pretty.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), pretty.String())

	// The indented golden file decodes to the same table: whitespace and
	// key order (PostgreSQL jsonb reorders keys) do not matter.
	dec, err := DecodeHeadersJSON(want)
	require.NoError(t, err)
	require.Equal(t, realisticHeaders(), dec)
}

func TestAppendHeadersJSONDeterministic(t *testing.T) {
	t.Parallel()
	tab := realisticHeaders()
	for i := range 30 {
		tab["k"+string(rune('a'+i))] = int32(i) // more keys than the stack buffer holds
	}
	first, err := AppendHeadersJSON(nil, tab)
	require.NoError(t, err)
	for range 50 { // map iteration order differs each time
		again, err := AppendHeadersJSON(nil, tab)
		require.NoError(t, err)
		require.Equal(t, string(first), string(again))
	}
}

func TestAppendHeadersJSONAppends(t *testing.T) {
	t.Parallel()
	dst := []byte("prefix:")
	got, err := AppendHeadersJSON(dst, amqp.Table{"a": "b"})
	require.NoError(t, err)
	require.Equal(t, `prefix:{"a":"b"}`, string(got))

	nilTable, err := AppendHeadersJSON(nil, nil)
	require.NoError(t, err)
	require.Equal(t, `{}`, string(nilTable))
}

// For text-only tables the output is exactly encoding/json's (which sorts
// map keys and escapes the same way), so tools that compare against
// encoding/json output agree with ours.
func TestAppendHeadersJSONMatchesEncodingJSONForText(t *testing.T) {
	t.Parallel()
	tab := amqp.Table{
		"plain":   "hello",
		"escapes": "\"\\\n\r\t\b\f\x01<>&\u2028\u2029",
		"unicode": "日本語 — ünïcödé 🎉",
		"bools":   []any{true, false, nil},
		"nested":  amqp.Table{"z": "1", "a": []any{"x", amqp.Table{"k": "v"}}},
		"Zkey":    "",
	}
	got, err := AppendHeadersJSON(nil, tab)
	require.NoError(t, err)
	want, err := json.Marshal(tab)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

func TestAppendHeadersJSONUnsupportedType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   amqp.Table
		want string
	}{
		{"top level", amqp.Table{"n": uint64(1)}, `broker: encode headers: header "n": unsupported Go type uint64 (AMQP cannot carry it)`},
		{"in array in table", amqp.Table{"x-death": []any{amqp.Table{"routing-keys": []string{"a"}}}}, `broker: encode headers: header "x-death"[0]."routing-keys": unsupported Go type []string (AMQP cannot carry it)`},
		{"plain map is not a table", amqp.Table{"m": map[string]any{}}, `header "m": unsupported Go type map[string]interface {}`},
		{"struct", amqp.Table{"s": struct{}{}}, `header "s": unsupported Go type struct {}`},
		{"pointer", amqp.Table{"p": new(string)}, `header "p": unsupported Go type *string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dst := []byte("keep")
			got, err := AppendHeadersJSON(dst, tt.in)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, "keep", string(got), "dst comes back unchanged on error")
		})
	}

	_, err := AppendValueJSON(nil, uint(1))
	require.EqualError(t, err, "broker: encode header value: unsupported Go type uint (AMQP cannot carry it)")
}

func TestHeadersDepthLimit(t *testing.T) {
	t.Parallel()
	deep := amqp.Table{}
	cur := deep
	for range maxHeaderDepth - 1 {
		next := amqp.Table{}
		cur["t"] = next
		cur = next
	}
	enc, err := AppendHeadersJSON(nil, deep)
	require.NoError(t, err, "%d levels are fine", maxHeaderDepth)
	_, err = DecodeHeadersJSON(enc)
	require.NoError(t, err)

	cur["t"] = amqp.Table{}
	_, err = AppendHeadersJSON(nil, deep)
	require.ErrorContains(t, err, "nested deeper than 64 levels")
	tooDeep := strings.Repeat(`{"t":`, maxHeaderDepth+1) + "{}" + strings.Repeat("}", maxHeaderDepth+1)
	_, err = DecodeHeadersJSON([]byte(tooDeep))
	require.ErrorContains(t, err, "nested deeper than 64 levels")

	// A table that contains itself must fail, not overflow the stack.
	cyclic := amqp.Table{}
	cyclic["self"] = []any{cyclic}
	_, err = AppendHeadersJSON(nil, cyclic)
	require.ErrorContains(t, err, "nested deeper")
}

func TestDecodeHeadersJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want amqp.Table
	}{
		{"null", `null`, nil},
		{"empty", `{}`, amqp.Table{}},
		{"whitespace and reordered wrapper keys", " { \"a\" : { \"value\" : 5 , \"type\" : \"int8\" } } ", amqp.Table{"a": int8(5)}},
		{"exponent float", `{"f":{"type":"float64","value":1.5E+3}}`, amqp.Table{"f": 1500.0}},
		{"typed plain string", `{"s":{"type":"string","value":"x"}}`, amqp.Table{"s": "x"}},
		{"timestamp with offset and fraction", `{"t":{"type":"timestamp","value":"2024-03-05T15:07:09.9+01:00"}}`, amqp.Table{"t": ts("2024-03-05T14:07:09Z")}},
		{"timestamp as seconds", `{"t":{"type":"timestamp","value":0}}`, amqp.Table{"t": time.Unix(0, 0)}},
		{"top-level wrapped table", `{"type":"table","value":{"type":"x"}}`, amqp.Table{"type": "x"}},
		{"int64 exact beyond 2^53", `{"n":{"type":"int64","value":9007199254740993}}`, amqp.Table{"n": int64(9007199254740993)}},
		{"escaped unicode key", `{"\u00e4\ud83c\udf89":true}`, amqp.Table{"ä🎉": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeHeadersJSON([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeHeadersJSONErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty input", ``, "broker: decode headers JSON: EOF"},
		{"syntax", `{"a":}`, "broker: decode headers JSON: invalid character '}'"},
		{"trailing data", `{} {}`, "unexpected data after the JSON value"},
		{"array at top", `[]`, "want an object, got an array"},
		{"typed at top", `{"type":"int8","value":1}`, "want a table, got a typed int8 value"},
		{"bare number", `{"n":5}`, `header "n": bare number 5: numbers must be written as {"type":T,"value":N}`},
		{"bare number in array", `{"a":[1]}`, `header "a"[0]: bare number 1`},
		{"unknown type", `{"a":{"type":"uint64","value":1}}`, `header "a": unknown value type "uint64"`},
		{"type not a string", `{"a":{"type":1,"value":1}}`, `header "a": "type" must be a string, got a number`},
		{"missing value", `{"a":{"type":"int8"}}`, `header "a": int8 value: "value" is missing`},
		{"int8 overflow", `{"a":{"type":"int8","value":128}}`, `header "a": int8 value 128: value out of range`},
		{"uint8 negative", `{"a":{"type":"uint8","value":-1}}`, `header "a": uint8 value -1: invalid syntax`},
		{"int with fraction", `{"a":{"type":"int32","value":1.0}}`, `header "a": int32 value 1.0: invalid syntax`},
		{"int as string", `{"a":{"type":"int64","value":"1"}}`, `header "a": int64 value: want an integer, got a string`},
		{"float32 overflow", `{"a":{"type":"float32","value":1e39}}`, `header "a": float32 value: 1e39: value out of range`},
		{"float bad string", `{"a":{"type":"float64","value":"inf"}}`, `header "a": float64 value: "inf": the only strings allowed are "NaN", "+Inf" and "-Inf"`},
		{"decimal shape", `{"a":{"type":"decimal","value":1}}`, `header "a": decimal value: want {"scale":n,"value":n}, got a number`},
		{"decimal extra key", `{"a":{"type":"decimal","value":{"scale":1,"value":1,"x":1}}}`, `decimal value: want {"scale":n,"value":n}, got an object`},
		{"decimal scale range", `{"a":{"type":"decimal","value":{"scale":256,"value":1}}}`, `header "a": decimal scale 256: value out of range`},
		{"decimal value range", `{"a":{"type":"decimal","value":{"scale":1,"value":2147483648}}}`, `header "a": decimal value 2147483648: value out of range`},
		{"timestamp format", `{"a":{"type":"timestamp","value":"2024-03-05 14:07:09"}}`, `header "a": timestamp value "2024-03-05 14:07:09": want RFC 3339`},
		{"timestamp fraction number", `{"a":{"type":"timestamp","value":1.5}}`, `header "a": timestamp value 1.5: want whole Unix seconds`},
		{"bytes not base64", `{"a":{"type":"bytes","value":"***"}}`, `header "a": bytes value: illegal base64 data at input byte 0`},
		{"bytes non-canonical padding bits", `{"a":{"type":"bytes","value":"aGl="}}`, `header "a": bytes value: illegal base64 data`},
		{"string bad encoding", `{"a":{"type":"string","encoding":"hex","value":"00"}}`, `header "a": string value: unknown encoding hex (want "base64")`},
		{"encoding on int", `{"a":{"type":"int8","encoding":"base64","value":1}}`, `header "a": int8 value: "encoding" is only allowed for string and table`},
		{"table value not object", `{"a":{"type":"table","value":[]}}`, `header "a": table value: want an object, got an array`},
		{"base64 key invalid", `{"type":"table","encoding":"base64","value":{"!":1}}`, `header "!": base64 table key: illegal base64 data`},
		{"base64 keys duplicate", `{"type":"table","encoding":"base64","value":{"YQ==":true,"Y\nQ==":false}}`, `header "a": duplicate base64 table key`},
		{"deep path", `{"x-death":[{"count":{"type":"int64","value":"3"}}]}`, `header "x-death"[0]."count": int64 value: want an integer, got a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeHeadersJSON([]byte(tt.in))
			require.ErrorContains(t, err, tt.want)
			require.True(t, strings.HasPrefix(err.Error(), "broker: decode headers JSON: "), err.Error())
		})
	}
}

func TestIsSafeText(t *testing.T) {
	t.Parallel()
	require.True(t, isSafeText(""))
	require.True(t, isSafeText("abc"))
	require.True(t, isSafeText("ü€🎉"))
	require.False(t, isSafeText("a\x00"))
	require.False(t, isSafeText("ü\x00"))
	require.False(t, isSafeText("\xc3"))
	require.False(t, isSafeText("ok\xc3("))
}

func TestAppendHeadersJSONAllocations(t *testing.T) {
	tab := realisticHeaders()
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = AppendHeadersJSON(buf[:0], tab)
		if err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs, "encoding into a buffer with room must not allocate")
}

func BenchmarkAppendHeadersJSON(b *testing.B) {
	tab := realisticHeaders()
	out, err := AppendHeadersJSON(nil, tab)
	require.NoError(b, err)
	b.Run("reused buffer", func(b *testing.B) {
		b.SetBytes(int64(len(out)))
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf, _ = AppendHeadersJSON(buf[:0], tab)
		}
	})
	b.Run("new buffer", func(b *testing.B) {
		b.SetBytes(int64(len(out)))
		b.ReportAllocs()
		for b.Loop() {
			_, _ = AppendHeadersJSON(make([]byte, 0, 1024), tab)
		}
	})
	b.Run("encoding/json for comparison", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(tab)
		}
	})
}

func BenchmarkDecodeHeadersJSON(b *testing.B) {
	in, err := AppendHeadersJSON(nil, realisticHeaders())
	require.NoError(b, err)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeHeadersJSON(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendString(b *testing.B) {
	for name, s := range map[string]string{
		"ascii":   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"unicode": "Bestellung für Müller — 日本語",
		"binary":  "\xde\xad\xbe\xef\x00\x01\x02\x03\xff\x00",
	} {
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 0, 256)
			b.ReportAllocs()
			for b.Loop() {
				buf = appendString(buf[:0], s)
			}
		})
	}
}
