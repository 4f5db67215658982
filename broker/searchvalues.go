package broker

import (
	"strconv"
	"strings"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// maxSearchValueLen drops long header values (stack traces, payload copies)
// before they are copied; store.SearchKeys applies the exact key limits.
const maxSearchValueLen = 256

// headerSearchValues lists the header values store.SearchKeys may turn into
// search keys: strings and integers at the top level and in tables one level
// down, but not RabbitMQ's death headers. It reads the decoded table, so
// ingest does not parse the headers' JSON a second time (that parse was a
// quarter of the consumer's CPU). It returns a non-nil slice, which tells
// store.SearchKeys the values were computed here.
// HeaderSearchValues is headerSearchValues, for messages that arrive as
// an export's typed headers (ops' import) rather than as a delivery.
func HeaderSearchValues(t amqp.Table) []string { return headerSearchValues(t) }

func headerSearchValues(t amqp.Table) []string {
	vals := make([]string, 0, len(t))
	return appendSearchValues(vals, t, 0)
}

func appendSearchValues(vals []string, t amqp.Table, depth int) []string {
	for k, v := range t {
		if strings.HasPrefix(k, "x-death") || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		switch v := v.(type) {
		case string:
			// Strings that the header JSON can only carry base64-encoded
			// are not searchable text.
			if len(v) <= maxSearchValueLen && utf8.ValidString(v) && strings.IndexByte(v, 0) < 0 {
				vals = append(vals, v)
			}
		case int64, int32, int16, int8, int, uint8, uint16, uint32:
			vals = append(vals, strconv.FormatInt(toInt64(v), 10))
		case amqp.Table:
			if depth == 0 && plainTable(v) {
				vals = appendSearchValues(vals, v, depth+1)
			}
		}
	}
	return vals
}

// plainTable reports whether store.SearchKeys, reading the header JSON,
// would descend into t: the codec (appendTable) wraps tables whose keys
// need base64 and tables that look like one of its typed values, and a
// table with a string "type" reads as a typed value.
func plainTable(t amqp.Table) bool {
	lookalike := true
	for k := range t {
		if !isSafeText(k) {
			return false
		}
		if k != "type" && k != "value" && k != "encoding" {
			lookalike = false
		}
	}
	typ, hasType := t["type"]
	if hasType && lookalike {
		return false
	}
	s, isString := typ.(string)
	return !isString || s == ""
}
