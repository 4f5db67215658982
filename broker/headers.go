package broker

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header tables are stored as JSON that keeps every AMQP type, so a message
// can be inspected by humans and resent byte-for-byte equivalent.
//
// The encoding (the product contract, extended only where JSON cannot carry
// an AMQP value as plain text):
//
//   - string (valid UTF-8, no NUL), bool, nil: plain JSON.
//   - amqp.Table: a JSON object, keys in byte order, so the output is
//     deterministic and can be hashed for de-duplication.
//   - []any: a JSON array.
//   - numbers, timestamps, decimals and byte arrays: {"type":T,"value":V} with
//     T one of int8 int16 int32 int64 uint8 uint16 uint32 float32 float64
//     decimal timestamp bytes. Go int is written as int64.
//   - float NaN and ±Inf: the value is the string "NaN", "+Inf" or "-Inf".
//     (Every NaN becomes the canonical NaN: the payload bits are not kept.)
//   - timestamp: "2006-01-02T15:04:05Z" (AMQP carries whole seconds; a Go time
//     is truncated as the AMQP writer would). A timestamp outside the years
//     0000–9999, which RFC 3339 cannot express, is a JSON number of Unix seconds.
//   - decimal: {"scale":n,"value":n}.
//   - bytes: standard base64 with padding.
//
// Extensions, needed to stay lossless:
//
//   - A string that is not valid UTF-8 or that contains NUL (AMQP strings are
//     arbitrary bytes; PostgreSQL jsonb rejects \u0000) is written as
//     {"type":"string","encoding":"base64","value":"<base64>"} and decodes back
//     to the same Go string.
//   - A table whose keys are not all valid UTF-8 without NUL is written as
//     {"type":"table","encoding":"base64","value":{"<base64 key>":v,…}}.
//   - A table that would be mistaken for a typed value — it has a "type" key and
//     no keys other than "type", "value" and "encoding" — is written as
//     {"type":"table","value":{…}}, whose keys are taken literally.
//     Headers of a dead-lettered message always carry x-death keys, so the
//     top-level object is never wrapped in practice.
//
// Strings are escaped exactly as encoding/json escapes them (including <, >,
// &, U+2028 and U+2029), so tables holding only text give byte-identical
// output to encoding/json.

// maxHeaderDepth bounds nesting in both directions. The AMQP reader refuses
// more than 32 levels, so this only stops runaway (or cyclic) Go values and
// hostile JSON.
const maxHeaderDepth = 64

// Bounds of the Unix seconds that RFC 3339 can express (years 0000–9999).
const (
	minRFC3339Unix = -62167219200 // 0000-01-01T00:00:00Z
	maxRFC3339Unix = 253402300799 // 9999-12-31T23:59:59Z
)

// AppendHeadersJSON appends the typed JSON encoding of t to dst. A nil table
// encodes as {}. The only error is a Go value that AMQP cannot carry (or a
// table nested deeper than 64 levels); its message names the header path.
// On error dst is returned unchanged.
func AppendHeadersJSON(dst []byte, t amqp.Table) ([]byte, error) {
	out, err := appendTable(dst, t, 0)
	if err != nil {
		return dst, fmt.Errorf("broker: encode headers: %w", err)
	}
	return out, nil
}

// AppendValueJSON appends the typed JSON encoding of a single header value
// (same rules as AppendHeadersJSON).
func AppendValueJSON(dst []byte, v any) ([]byte, error) {
	out, err := appendValue(dst, v, 0)
	if err != nil {
		return dst, fmt.Errorf("broker: encode header value: %w", err)
	}
	return out, nil
}

// pathError carries the location of a bad value up the recursion; segments
// are added innermost first, as the stack unwinds, so the happy path never
// pays for building a path.
type pathError struct {
	rev []string // path segments, innermost first
	msg string
}

func (e *pathError) Error() string {
	if len(e.rev) == 0 {
		return e.msg
	}
	var b strings.Builder
	b.WriteString("header ")
	for i := len(e.rev) - 1; i >= 0; i-- {
		seg := e.rev[i]
		if i != len(e.rev)-1 && seg[0] != '[' {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	b.WriteString(": ")
	b.WriteString(e.msg)
	return b.String()
}

func atKey(err error, key string) error {
	if pe, ok := err.(*pathError); ok {
		pe.rev = append(pe.rev, strconv.Quote(key))
	}
	return err
}

func atIndex(err error, i int) error {
	if pe, ok := err.(*pathError); ok {
		pe.rev = append(pe.rev, "["+strconv.Itoa(i)+"]")
	}
	return err
}

// tableEntry is one key/value pair collected for sorting.
type tableEntry struct {
	k string
	v any
}

func appendTable(dst []byte, t amqp.Table, depth int) ([]byte, error) {
	if depth >= maxHeaderDepth {
		return dst, &pathError{msg: fmt.Sprintf("tables and arrays nested deeper than %d levels", maxHeaderDepth)}
	}
	if len(t) == 0 {
		return append(dst, '{', '}'), nil
	}
	// Small tables (nearly all header tables) are sorted in a stack buffer.
	var buf [16]tableEntry
	entries := buf[:0]
	safeKeys, typedLookalike := true, true
	for k, v := range t {
		entries = append(entries, tableEntry{k, v})
		if safeKeys && !isSafeText(k) {
			safeKeys = false
		}
		if typedLookalike && k != "type" && k != "value" && k != "encoding" {
			typedLookalike = false
		}
	}
	sortEntries(entries)
	if typedLookalike {
		_, typedLookalike = t["type"]
	}

	dst = appendTableOpen(dst, safeKeys, typedLookalike)
	var err error
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		if safeKeys {
			dst = appendEscaped(dst, e.k)
		} else {
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, []byte(e.k))
			dst = append(dst, '"')
		}
		dst = append(dst, ':')
		if dst, err = appendValue(dst, e.v, depth+1); err != nil {
			return dst, atKey(err, e.k)
		}
	}
	dst = append(dst, '}')
	if !safeKeys || typedLookalike {
		dst = append(dst, '}')
	}
	return dst, nil
}

// appendTableOpen opens a non-empty table's JSON: wrapped as a typed
// table, its keys base64, when a key is not safe text; wrapped when its
// keys alone would read as a typed value ("type", "value", "encoding");
// a plain object otherwise. Both encoders (the amqp.Table's, appendTable,
// and the raw bytes', appendRawEntries) open tables here, so that they
// write the same bytes; the matching close is "}}" when wrapped, "}"
// otherwise.
func appendTableOpen(dst []byte, safeKeys, lookalike bool) []byte {
	switch {
	case !safeKeys:
		return append(dst, `{"type":"table","encoding":"base64","value":{`...)
	case lookalike:
		return append(dst, `{"type":"table","value":{`...)
	default:
		return append(dst, '{')
	}
}

// PlainJSONTable reports whether AppendHeadersJSON writes t as a plain JSON
// object with its keys as they are. It wraps a table whose keys need base64
// and one that would be mistaken for a typed value (see appendTable).
func PlainJSONTable(t amqp.Table) bool {
	lookalike := true
	for k := range t {
		if !isSafeText(k) {
			return false
		}
		if k != "type" && k != "value" && k != "encoding" {
			lookalike = false
		}
	}
	_, hasType := t["type"]
	return !hasType || !lookalike
}

// sortEntries is an insertion sort: header tables are small, and unlike
// slices.SortFunc it keeps the stack buffer from escaping.
func sortEntries(e []tableEntry) {
	for i := 1; i < len(e); i++ {
		for j := i; j > 0 && e[j].k < e[j-1].k; j-- {
			e[j], e[j-1] = e[j-1], e[j]
		}
	}
}

func appendArray(dst []byte, a []any, depth int) ([]byte, error) {
	if depth >= maxHeaderDepth {
		return dst, &pathError{msg: fmt.Sprintf("tables and arrays nested deeper than %d levels", maxHeaderDepth)}
	}
	dst = append(dst, '[')
	var err error
	for i, v := range a {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = appendValue(dst, v, depth+1); err != nil {
			return dst, atIndex(err, i)
		}
	}
	return append(dst, ']'), nil
}

func appendValue(dst []byte, v any, depth int) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return appendString(dst, v), nil
	case bool:
		if v {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case amqp.Table:
		return appendTable(dst, v, depth)
	case []any:
		return appendArray(dst, v, depth)
	case int64:
		return appendIntJSON(dst, "int64", v), nil
	case int32:
		return appendIntJSON(dst, "int32", int64(v)), nil
	case int16:
		return appendIntJSON(dst, "int16", int64(v)), nil
	case int8:
		return appendIntJSON(dst, "int8", int64(v)), nil
	case int:
		return appendIntJSON(dst, "int64", int64(v)), nil
	case uint8:
		return appendUintJSON(dst, "uint8", uint64(v)), nil
	case uint16:
		return appendUintJSON(dst, "uint16", uint64(v)), nil
	case uint32:
		return appendUintJSON(dst, "uint32", uint64(v)), nil
	case float32:
		return appendFloatJSON(dst, "float32", float64(v), 32), nil
	case float64:
		return appendFloatJSON(dst, "float64", v, 64), nil
	case time.Time:
		dst = append(dst, `{"type":"timestamp","value":`...)
		return append(appendTimestamp(dst, v), '}'), nil
	case amqp.Decimal:
		return appendDecimalJSON(dst, v), nil
	case []byte:
		return appendBytesJSON(dst, v), nil
	}
	return dst, &pathError{msg: fmt.Sprintf("unsupported Go type %T (AMQP cannot carry it)", v)}
}

// The typed forms of the values plain JSON cannot carry; the decoded
// (appendValue) and the raw (appendRawValue) encodings both write them here.

func appendIntJSON(dst []byte, typ string, v int64) []byte {
	dst = append(append(append(dst, `{"type":"`...), typ...), `","value":`...)
	return append(strconv.AppendInt(dst, v, 10), '}')
}

func appendUintJSON(dst []byte, typ string, v uint64) []byte {
	dst = append(append(append(dst, `{"type":"`...), typ...), `","value":`...)
	return append(strconv.AppendUint(dst, v, 10), '}')
}

func appendFloatJSON(dst []byte, typ string, f float64, bits int) []byte {
	dst = append(append(append(dst, `{"type":"`...), typ...), `","value":`...)
	return append(appendFloat(dst, f, bits), '}')
}

func appendDecimalJSON(dst []byte, v amqp.Decimal) []byte {
	dst = append(dst, `{"type":"decimal","value":{"scale":`...)
	dst = strconv.AppendUint(dst, uint64(v.Scale), 10)
	dst = append(dst, `,"value":`...)
	dst = strconv.AppendInt(dst, int64(v.Value), 10)
	return append(dst, '}', '}')
}

func appendBytesJSON[T amqpBytes](dst []byte, v T) []byte {
	dst = append(dst, `{"type":"bytes","value":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, []byte(v))
	return append(dst, '"', '}')
}

// appendFloat writes f the way encoding/json does (shortest form that parses
// back to the same value, exponent only for very small or large magnitudes),
// and writes NaN and infinities, which JSON numbers cannot express, as strings.
func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"+Inf"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Inf"`...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// Shorten e-09 to e-9, as encoding/json does.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// appendTimestamp writes whole UTC seconds as "2006-01-02T15:04:05Z" without
// going through time.Format, or Unix seconds when RFC 3339 cannot hold them.
func appendTimestamp(dst []byte, t time.Time) []byte {
	sec := t.Unix()
	if sec < minRFC3339Unix || sec > maxRFC3339Unix {
		return strconv.AppendInt(dst, sec, 10)
	}
	u := time.Unix(sec, 0).UTC()
	y, mo, d := u.Date()
	h, mi, s := u.Clock()
	dst = append(dst, '"',
		byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
		byte('0'+int(mo)/10), byte('0'+int(mo)%10), '-',
		byte('0'+d/10), byte('0'+d%10), 'T',
		byte('0'+h/10), byte('0'+h%10), ':',
		byte('0'+mi/10), byte('0'+mi%10), ':',
		byte('0'+s/10), byte('0'+s%10), 'Z', '"')
	return dst
}

// isSafeText reports whether s can be a plain JSON string: valid UTF-8 (so
// nothing is replaced) and free of NUL (which PostgreSQL jsonb refuses).
func isSafeText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			return strings.IndexByte(s[i:], 0) < 0 && utf8.ValidString(s[i:])
		}
	}
	return true
}

// appendString writes s as a plain JSON string when that is lossless, else as
// the base64 string form.
func appendString(dst []byte, s string) []byte {
	i := 0
	for i < len(s) && verbatim[s[i]] == '1' {
		i++
	}
	if i < len(s) {
		if !isSafeText(s[i:]) {
			dst = append(dst, `{"type":"string","encoding":"base64","value":"`...)
			dst = base64.StdEncoding.AppendEncode(dst, []byte(s))
			return append(dst, '"', '}')
		}
		return appendEscaped(dst, s)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// verbatim[c] is '1' for the bytes a JSON string can hold unescaped: ASCII
// from space up, except the quote, the backslash and the HTML-sensitive
// <, > and & (escaped like encoding/json does). Bytes from 0x80 need a UTF-8
// check. A string constant indexed by a byte needs no bounds check.
const verbatim = "" +
	"0000000000000000000000000000000011011101111111111111111111110101" +
	"1111111111111111111111111111011111111111111111111111111111111111" +
	"0000000000000000000000000000000000000000000000000000000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000"

const hexDigits = "0123456789abcdef"

// strictBase64 refuses non-zero padding bits, so each byte string has a
// single accepted spelling (CR and LF are still skipped, see decodeTable).
var strictBase64 = base64.StdEncoding.Strict()

// appendEscaped quotes s with the escapes encoding/json uses. Invalid UTF-8 is
// replaced by U+FFFD (callers that need losslessness check isSafeText first).
func appendEscaped(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if verbatim[c] == '1' {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but not valid JavaScript; encoding/json escapes them too.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
