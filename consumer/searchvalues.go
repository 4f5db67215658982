package consumer

import (
	"strconv"
	"strings"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
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
func headerSearchValues(t amqp.Table) []string {
	vals := make([]string, 0, len(t))
	return appendSearchValues(vals, t, 0)
}

func appendSearchValues(vals []string, t amqp.Table, depth int) []string {
	for k, v := range t {
		if !searchableKey(k) {
			continue
		}
		switch v := v.(type) {
		case string:
			if searchableText(v) {
				vals = append(vals, v)
			}
		case int64:
			vals = append(vals, strconv.FormatInt(v, 10))
		case int32:
			vals = append(vals, strconv.FormatInt(int64(v), 10))
		case int16:
			vals = append(vals, strconv.FormatInt(int64(v), 10))
		case int8:
			vals = append(vals, strconv.FormatInt(int64(v), 10))
		case int:
			vals = append(vals, strconv.FormatInt(int64(v), 10))
		case uint8:
			vals = append(vals, strconv.FormatInt(int64(v), 10))
		case uint16:
			vals = append(vals, strconv.FormatInt(int64(v), 10))
		case uint32:
			vals = append(vals, strconv.FormatInt(int64(v), 10))
		case amqp.Table:
			if depth == 0 && plainTable(v) {
				vals = appendSearchValues(vals, v, depth+1)
			}
		}
	}
	return vals
}

// plainTable reports whether store.SearchKeys, reading the header JSON,
// would descend into t: the codec writes it as a plain object
// (broker.PlainJSONTable), and it has no string "type", which reads as a
// typed value.
func plainTable(t amqp.Table) bool {
	if !broker.PlainJSONTable(t) {
		return false
	}
	s, isString := t["type"].(string)
	return !isString || s == ""
}

// searchableKey reports whether a header's values may be searched: not
// RabbitMQ's death headers.
func searchableKey(k string) bool {
	return !strings.HasPrefix(k, "x-death") && !strings.HasPrefix(k, "x-first-death-") && !strings.HasPrefix(k, "x-last-death-")
}

// searchableText reports whether a string header value is searchable:
// short, and text the header JSON carries as it is (not base64-encoded).
func searchableText(s string) bool {
	return len(s) <= maxSearchValueLen && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// rawSearchValues is headerSearchValues for a table read from its bytes,
// with the same values (in key order).
func rawSearchValues(t *broker.RawTable) []string {
	vals := make([]string, 0, t.Len())
	return appendRawSearchValues(vals, t, 0)
}

func appendRawSearchValues(vals []string, t *broker.RawTable, depth int) []string {
	for i := range t.Len() {
		k, v := t.Entry(i)
		if !searchableKey(k) {
			continue
		}
		if s, ok := v.Text(); ok {
			if searchableText(s) {
				vals = append(vals, s)
			}
		} else if n, ok := v.Int(); ok {
			vals = append(vals, strconv.FormatInt(n, 10))
		} else if nt, ok := v.Table(); ok && depth == 0 && rawPlainTable(nt) {
			vals = appendRawSearchValues(vals, nt, depth+1)
		}
	}
	return vals
}

// rawPlainTable is plainTable for a table read from its bytes.
func rawPlainTable(t *broker.RawTable) bool {
	if !t.PlainJSON() {
		return false
	}
	v, ok := t.Get("type")
	if !ok {
		return true
	}
	s, isString := v.Text()
	return !isString || s == ""
}
