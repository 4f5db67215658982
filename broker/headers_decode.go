package broker

// The decoding half of the typed header JSON (headers.go has the
// encoding and its description): stored headers back to an amqp.Table.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DecodeHeadersJSON is the inverse of AppendHeadersJSON: every value comes
// back with the Go type the AMQP reader produces (int16 stays int16, bytes
// stay []byte, timestamps are time.Unix(sec, 0)), so a decoded table is
// deep-equal to the delivered one. JSON null decodes to a nil table. Numbers
// without a {"type":…} wrapper are refused: their AMQP type would be a guess.
func DecodeHeadersJSON(b []byte) (amqp.Table, error) {
	raw, err := parseJSON(b)
	if err != nil {
		return nil, fmt.Errorf("broker: decode headers JSON: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("broker: decode headers JSON: want an object, got %s", jsonKind(raw))
	}
	v, err := decodeObject(obj, 0)
	if err != nil {
		return nil, fmt.Errorf("broker: decode headers JSON: %w", err)
	}
	t, ok := v.(amqp.Table)
	if !ok {
		return nil, fmt.Errorf("broker: decode headers JSON: want a table, got a typed %v value", obj["type"])
	}
	return t, nil
}

// parseJSON parses exactly one JSON value, keeping numbers as text so that
// int64 values beyond 2^53 stay exact.
func parseJSON(b []byte) (any, error) {
	if v, ok := parseJSONFast(b); ok {
		return v, nil
	}
	return parseJSONStd(b)
}

// parseJSONStd parses b with encoding/json (numbers kept as json.Number):
// parseJSON's fallback, and the reference its fast path is tested against.
func parseJSONStd(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return raw, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func decodeValue(raw any, depth int) (any, error) {
	switch v := raw.(type) {
	case nil, bool, string:
		return v, nil
	case json.Number:
		return nil, &pathError{msg: fmt.Sprintf(`bare number %s: numbers must be written as {"type":T,"value":N}`, v)}
	case []any:
		if depth >= maxHeaderDepth {
			return nil, &pathError{msg: fmt.Sprintf("tables and arrays nested deeper than %d levels", maxHeaderDepth)}
		}
		out := make([]any, len(v))
		for i, e := range v {
			d, err := decodeValue(e, depth+1)
			if err != nil {
				return nil, atIndex(err, i)
			}
			out[i] = d
		}
		return out, nil
	case map[string]any:
		return decodeObject(v, depth)
	}
	return nil, &pathError{msg: fmt.Sprintf("unexpected JSON value %T", raw)}
}

// isTypedObject reports whether a JSON object is a {"type":…} wrapper rather
// than a table: it has "type" and nothing besides "value" and "encoding".
func isTypedObject(obj map[string]any) bool {
	if _, ok := obj["type"]; !ok {
		return false
	}
	for k := range obj {
		if k != "type" && k != "value" && k != "encoding" {
			return false
		}
	}
	return true
}

func decodeObject(obj map[string]any, depth int) (any, error) {
	if depth >= maxHeaderDepth {
		return nil, &pathError{msg: fmt.Sprintf("tables and arrays nested deeper than %d levels", maxHeaderDepth)}
	}
	if !isTypedObject(obj) {
		return decodeTable(obj, false, depth)
	}
	typ, val, inBase64, err := typedMembers(obj)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "int8", "int16", "int32", "int64":
		return decodeSigned(typ, val)
	case "uint8", "uint16", "uint32":
		return decodeUnsigned(typ, val)
	case "float32", "float64":
		return decodeFloatValue(typ, val)
	case "decimal":
		return decodeDecimal(val)
	case "timestamp":
		return decodeTimestamp(val)
	case "bytes":
		return decodeBytes(val)
	case "string":
		return decodeString(val, inBase64)
	case "table":
		o, ok := val.(map[string]any)
		if !ok {
			return nil, badValue(typ, val, "an object")
		}
		return decodeTable(o, inBase64, depth)
	}
	return nil, &pathError{msg: fmt.Sprintf("unknown value type %q", typ)}
}

// typedMembers reads the members of a {"type":…} wrapper and checks those
// every type shares: its type, its value, and whether the value is base64
// ("encoding", allowed for strings and tables).
func typedMembers(obj map[string]any) (typ string, val any, inBase64 bool, err error) {
	typ, ok := obj["type"].(string)
	if !ok {
		return "", nil, false, &pathError{msg: fmt.Sprintf(`"type" must be a string, got %s`, jsonKind(obj["type"]))}
	}
	val, ok = obj["value"]
	if !ok {
		return "", nil, false, &pathError{msg: fmt.Sprintf(`%s value: "value" is missing`, typ)}
	}
	encoding, hasEncoding := obj["encoding"]
	if hasEncoding {
		if typ != "string" && typ != "table" {
			return "", nil, false, &pathError{msg: fmt.Sprintf(`%s value: "encoding" is only allowed for string and table`, typ)}
		}
		if encoding != "base64" {
			return "", nil, false, &pathError{msg: fmt.Sprintf(`%s value: unknown encoding %v (want "base64")`, typ, encoding)}
		}
	}
	return typ, val, hasEncoding, nil
}

// decodeSigned decodes the value of a signed integer type (int8 … int64)
// into the Go type of that size.
func decodeSigned(typ string, val any) (any, error) {
	n, ok := val.(json.Number)
	if !ok {
		return nil, badValue(typ, val, "an integer")
	}
	bits := intBits(typ)
	i, err := strconv.ParseInt(string(n), 10, bits)
	if err != nil {
		return nil, &pathError{msg: fmt.Sprintf("%s value %s: %v", typ, n, errors.Unwrap(err))}
	}
	switch bits {
	case 8:
		return int8(i), nil
	case 16:
		return int16(i), nil
	case 32:
		return int32(i), nil
	}
	return i, nil
}

// decodeUnsigned decodes the value of an unsigned integer type (uint8 …
// uint32; AMQP has no unsigned 64-bit type) into the Go type of that size.
func decodeUnsigned(typ string, val any) (any, error) {
	n, ok := val.(json.Number)
	if !ok {
		return nil, badValue(typ, val, "an unsigned integer")
	}
	bits := intBits(typ)
	u, err := strconv.ParseUint(string(n), 10, bits)
	if err != nil {
		return nil, &pathError{msg: fmt.Sprintf("%s value %s: %v", typ, n, errors.Unwrap(err))}
	}
	switch bits {
	case 8:
		return uint8(u), nil
	case 16:
		return uint16(u), nil
	}
	return uint32(u), nil
}

// decodeFloatValue decodes a float32 or float64 value, rounded to its
// type's precision.
func decodeFloatValue(typ string, val any) (any, error) {
	bits := 64
	if typ == "float32" {
		bits = 32
	}
	f, err := decodeFloat(val, bits)
	if err != nil {
		return nil, &pathError{msg: fmt.Sprintf("%s value: %v", typ, err)}
	}
	if bits == 32 {
		return float32(f), nil
	}
	return f, nil
}

// decodeDecimal decodes a decimal's {"scale":n,"value":n}, each in the
// range of AMQP's octet and signed 32-bit integer.
func decodeDecimal(val any) (any, error) {
	d, ok := val.(map[string]any)
	if !ok || len(d) != 2 {
		return nil, badValue("decimal", val, `{"scale":n,"value":n}`)
	}
	scale, ok1 := d["scale"].(json.Number)
	value, ok2 := d["value"].(json.Number)
	if !ok1 || !ok2 {
		return nil, badValue("decimal", val, `{"scale":n,"value":n}`)
	}
	s, err := strconv.ParseUint(string(scale), 10, 8)
	if err != nil {
		return nil, &pathError{msg: fmt.Sprintf("decimal scale %s: %v", scale, errors.Unwrap(err))}
	}
	v, err := strconv.ParseInt(string(value), 10, 32)
	if err != nil {
		return nil, &pathError{msg: fmt.Sprintf("decimal value %s: %v", value, errors.Unwrap(err))}
	}
	return amqp.Decimal{Scale: uint8(s), Value: int32(v)}, nil
}

// decodeTimestamp decodes a timestamp written in RFC 3339 or as Unix
// seconds into the whole-second local time the AMQP reader produces.
func decodeTimestamp(val any) (any, error) {
	switch v := val.(type) {
	case string:
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, &pathError{msg: fmt.Sprintf("timestamp value %q: want RFC 3339", v)}
		}
		return time.Unix(t.Unix(), 0), nil
	case json.Number:
		sec, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return nil, &pathError{msg: fmt.Sprintf("timestamp value %s: want whole Unix seconds", v)}
		}
		return time.Unix(sec, 0), nil
	}
	return nil, badValue("timestamp", val, "an RFC 3339 string or Unix seconds")
}

// decodeBytes decodes a byte array, always written in base64.
func decodeBytes(val any) (any, error) {
	s, ok := val.(string)
	if !ok {
		return nil, badValue("bytes", val, "a base64 string")
	}
	b, err := strictBase64.DecodeString(s)
	if err != nil {
		return nil, &pathError{msg: fmt.Sprintf("bytes value: %v", err)}
	}
	return b, nil
}

// decodeString decodes a string, in base64 when it is not valid UTF-8 or
// holds NUL (which jsonb refuses).
func decodeString(val any, inBase64 bool) (any, error) {
	s, ok := val.(string)
	if !ok {
		return nil, badValue("string", val, "a string")
	}
	if !inBase64 {
		return s, nil
	}
	b, err := strictBase64.DecodeString(s)
	if err != nil {
		return nil, &pathError{msg: fmt.Sprintf("base64 string value: %v", err)}
	}
	return string(b), nil
}

// intBits is the size of an integer type name ("int16" -> 16).
func intBits(typ string) int {
	switch strings.TrimPrefix(typ, "u") {
	case "int8":
		return 8
	case "int16":
		return 16
	case "int32":
		return 32
	}
	return 64
}

func badValue(typ string, val any, want string) error {
	return &pathError{msg: fmt.Sprintf("%s value: want %s, got %s", typ, want, jsonKind(val))}
}

func decodeFloat(val any, bits int) (float64, error) {
	switch v := val.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(v), bits)
		if err != nil {
			// ParseFloat reports overflow as a range error; a stored value
			// never overflows its own type.
			return 0, fmt.Errorf("%s: %w", v, errors.Unwrap(err))
		}
		return f, nil
	case string:
		switch v {
		case "NaN":
			return math.NaN(), nil
		case "+Inf":
			return math.Inf(1), nil
		case "-Inf":
			return math.Inf(-1), nil
		}
		return 0, fmt.Errorf(`%q: the only strings allowed are "NaN", "+Inf" and "-Inf"`, v)
	}
	return 0, fmt.Errorf("want a number, got %s", jsonKind(val))
}

func decodeTable(obj map[string]any, base64Keys bool, depth int) (any, error) {
	t := make(amqp.Table, len(obj))
	for k, raw := range obj {
		key := k
		if base64Keys {
			b, err := strictBase64.DecodeString(k)
			if err != nil {
				return nil, atKey(&pathError{msg: fmt.Sprintf("base64 table key: %v", err)}, k)
			}
			key = string(b)
			if _, dup := t[key]; dup {
				// Base64 with line breaks spells the same key twice.
				return nil, atKey(&pathError{msg: "duplicate base64 table key"}, key)
			}
		}
		v, err := decodeValue(raw, depth+1)
		if err != nil {
			return nil, atKey(err, key)
		}
		t[key] = v
	}
	return t, nil
}
