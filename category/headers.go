package category

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// HeaderText is a header value as the rules see it: a string as it is, a
// byte array holding UTF-8 text as that text, an integer in decimal, a
// boolean as true or false. Anything else (floats, decimals, timestamps,
// tables, arrays) is not text. It takes the values amqp091-go decodes.
func HeaderText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		if utf8.Valid(v) {
			return string(v), true
		}
	case bool:
		return strconv.FormatBool(v), true
	case int:
		return strconv.FormatInt(int64(v), 10), true
	case int8:
		return strconv.FormatInt(int64(v), 10), true
	case int16:
		return strconv.FormatInt(int64(v), 10), true
	case int32:
		return strconv.FormatInt(int64(v), 10), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case uint8:
		return strconv.FormatUint(uint64(v), 10), true
	case uint16:
		return strconv.FormatUint(uint64(v), 10), true
	case uint32:
		return strconv.FormatUint(uint64(v), 10), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	}
	return "", false
}

// HeadersJSON returns a Fields.Header over headers stored as dlq's typed
// JSON (docs/ARCHITECTURE.md, "The header codec"), giving each value the
// text HeaderText gives the value it was encoded from. The JSON is decoded
// on the first lookup only.
func HeadersJSON(raw []byte) func(name string) (string, bool) {
	var (
		decoded bool
		table   map[string]json.RawMessage
	)
	return func(name string) (string, bool) {
		if !decoded {
			decoded = true
			table = topLevel(raw)
		}
		v, ok := table[name]
		if !ok {
			return "", false
		}
		return jsonText(v)
	}
}

// typed is the JSON shape of a typed header value.
type typed struct {
	Type     string          `json:"type"`
	Value    json.RawMessage `json:"value"`
	Encoding string          `json:"encoding"`
}

// topLevel decodes the header table, unwrapping the forms the codec uses
// for a table whose keys are not plain text or that looks like a typed
// value.
func topLevel(raw []byte) map[string]json.RawMessage {
	var t map[string]json.RawMessage
	if json.Unmarshal(raw, &t) != nil {
		return nil
	}
	var w typed
	if _, ok := t["type"]; !ok || json.Unmarshal(raw, &w) != nil || w.Type != "table" || len(w.Value) == 0 {
		return t
	}
	for k := range t {
		if k != "type" && k != "value" && k != "encoding" {
			return t
		}
	}
	var inner map[string]json.RawMessage
	if json.Unmarshal(w.Value, &inner) != nil {
		return t
	}
	if w.Encoding != "base64" {
		return inner
	}
	out := make(map[string]json.RawMessage, len(inner))
	for k, v := range inner {
		if name, err := base64.StdEncoding.DecodeString(k); err == nil {
			out[string(name)] = v
		}
	}
	return out
}

func jsonText(v json.RawMessage) (string, bool) {
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		return s, true
	case 't', 'f':
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return "", false
		}
		return strconv.FormatBool(b), true
	case '{':
	default:
		return "", false
	}
	var t typed
	if json.Unmarshal(v, &t) != nil {
		return "", false
	}
	switch t.Type {
	case "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64":
		n := string(t.Value)
		if _, err := strconv.ParseInt(n, 10, 64); err == nil {
			return n, true
		}
		if _, err := strconv.ParseUint(n, 10, 64); err == nil {
			return n, true
		}
	case "bytes", "string":
		if t.Type == "string" && t.Encoding != "base64" {
			return "", false
		}
		var s string
		if json.Unmarshal(t.Value, &s) != nil {
			return "", false
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || (t.Type == "bytes" && !utf8.Valid(b)) {
			return "", false
		}
		return string(b), true
	}
	return "", false
}
