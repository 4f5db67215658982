package console

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
	"unicode/utf8"
)

// Body display limits: a page stays small (< 150 KB) whatever the body,
// even one made of characters HTML must escape (a quote takes 5 bytes);
// the download link serves it whole.
const (
	// bodyTextCap is the most bytes shown as formatted JSON or text.
	bodyTextCap = 24 << 10
	// bodyHexCap is the most body bytes shown as a hex dump (about 4.2
	// characters per byte).
	bodyHexCap = 8 << 10
)

// bodyView is a message body as the message page shows it.
type bodyView struct {
	// Hidden: the token may not see bodies (the layer sent none).
	Hidden bool
	// Kind is "json", "text" or "binary"; Text is what the page shows
	// (formatted JSON, the text, or a hex dump), as inert text.
	Kind string
	Text string
	// Size is the whole body's size; Shown how many of its bytes Text
	// covers (less when capped).
	Size, Shown int64
}

// Truncated reports whether the page shows only part of the body.
func (b bodyView) Truncated() bool { return b.Shown < b.Size }

// viewBody decides how to show a body: JSON formatted when it parses as
// JSON, text when it is valid UTF-8 without control characters, else a
// hex dump. contentEncoding other than identity (gzip...) means the bytes
// are not the text they encode, so they are dumped.
func viewBody(body *[]byte, size int64, contentEncoding string) bodyView {
	if body == nil {
		return bodyView{Hidden: true, Size: size}
	}
	b := *body
	v := bodyView{Size: int64(len(b))}
	enc := strings.ToLower(strings.TrimSpace(contentEncoding))
	textual := (enc == "" || enc == "identity" || enc == "utf-8" || enc == "utf8") && isText(b)
	switch {
	case textual && looksJSON(b):
		// Formatted up to the cap, even when the cut falls inside a value:
		// what is shown of a large body is as readable as a small one.
		text, n, ok := prettyJSON(b, bodyTextCap)
		if ok && (n < len(b) || json.Valid(b)) {
			v.Kind, v.Text, v.Shown = "json", text, int64(n)
			if n == len(b) {
				v.Shown = v.Size
			}
			return v
		}
		fallthrough
	case textual:
		cut := b[:min(len(b), bodyTextCap)]
		for len(cut) > 0 && !utf8.Valid(cut) { // do not split a rune
			cut = cut[:len(cut)-1]
		}
		v.Kind, v.Text, v.Shown = "text", string(cut), int64(len(cut))
	default:
		cut := b[:min(len(b), bodyHexCap)]
		v.Kind, v.Text, v.Shown = "binary", hex.Dump(cut), int64(len(cut))
	}
	return v
}

// looksJSON reports whether b starts as a JSON object or array does.
func looksJSON(b []byte) bool {
	i := skipSpace(b, 0)
	return i < len(b) && (b[i] == '{' || b[i] == '[')
}

// isText reports whether b is valid UTF-8 with no control characters but
// tab, newline and carriage return.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f {
			return false
		}
	}
	return true
}

// field is one row of a headers or properties table.
type field struct {
	Name string
	// Type is the AMQP field type: a {"type": T} value's T, or string,
	// boolean, void, table or array for plain JSON.
	Type  string
	Value string
}

// amqpTypes are the types stored as {"type": T, "value": V}.
var amqpTypes = map[string]bool{"int8": true, "int16": true, "int32": true, "int64": true, "uint8": true,
	"uint16": true, "uint32": true, "float32": true, "float64": true, "decimal": true, "timestamp": true, "bytes": true}

// viewFields turns a typed JSON table (headers or properties) into rows,
// sorted by name. Values are shown as text; nested tables and arrays as
// compact JSON.
func viewFields(table json.RawMessage) []field {
	var m map[string]json.RawMessage
	if len(table) == 0 || json.Unmarshal(table, &m) != nil {
		return nil
	}
	out := make([]field, 0, len(m))
	for k, raw := range m {
		t, v := typed(raw)
		out = append(out, field{Name: k, Type: t, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// typed names a typed JSON value's AMQP type and renders its value.
func typed(raw json.RawMessage) (string, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "void", ""
	}
	switch raw[0] {
	case '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		return "string", s
	case 't', 'f':
		return "boolean", string(raw)
	case 'n':
		return "void", "null"
	case '[':
		return "array", compact(raw)
	case '{':
		var tv struct {
			Type  string          `json:"type"`
			Value json.RawMessage `json:"value"`
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(raw, &keys) == nil && len(keys) == 2 && json.Unmarshal(raw, &tv) == nil && amqpTypes[tv.Type] {
			var s string
			if json.Unmarshal(tv.Value, &s) == nil {
				return tv.Type, s
			}
			return tv.Type, compact(tv.Value)
		}
		return "table", compact(raw)
	}
	return "number", string(raw)
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// failureView is the failure detail of a message.
type failureView struct {
	Type, Message, Stack, Origin, At string
}

func viewFailure(raw json.RawMessage) *failureView {
	var f struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Stack   string `json:"stack"`
		Origin  string `json:"origin"`
		At      string `json:"at"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil || (f.Type == "" && f.Message == "" && f.Stack == "") {
		return nil
	}
	v := failureView(f)
	return &v
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
