package broker

import (
	"encoding/base64"
	"fmt"
	"math"
	"time"
	"unsafe"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header tables read from their AMQP encoding.
//
// amqp091-go decodes every delivery's header table into an amqp.Table: a
// map, a boxed value per entry, a map per x-death entry. Ingest only needs
// the table's typed JSON (AppendHeadersJSON) and a handful of its entries
// (death headers, failure conventions, dlq's replay marks), so the frame
// filter hands the ingest consumer the table's bytes instead (RawHeaders)
// and RawTable reads them: the JSON is written straight from the bytes,
// and only the entries asked for are decoded, into the same Go values
// amqp091-go would have made. Both paths must give the same bytes and
// values for every table amqp091-go decodes (FuzzRawTable).

// RawTable is a decodable AMQP header table (the body, without its length
// prefix), read as amqp091-go would: one entry per key, the last one when
// a key repeats (amqp091-go stores them into a map in order). Keys and
// string values are substrings of the table, so reading allocates little.
type RawTable struct {
	s       string     // the table body
	entries []rawEntry // sorted by key, byte order
	buf     [20]rawEntry
	// safeKeys and lookalike decide how AppendHeadersJSON writes the table
	// (appendTable).
	safeKeys, lookalike bool
	// exact is the death record rawDeaths read from the table when it
	// says the x-death header exactly (exactDeathEntry), nil otherwise:
	// AppendJSONDeathSpan then writes the header from it.
	exact []Death
}

// RawValue is one field value in its AMQP encoding: the type byte, then
// the value.
type RawValue string

// rawEntry locates one entry in the table body: its key is s[k0:k1] and
// its value s[k1:v1]. Offsets rather than substrings keep the entries free
// of pointers, so sorting them costs no write barriers.
type rawEntry struct{ k0, k1, v1 uint32 }

func (e rawEntry) key(s string) string   { return s[e.k0:e.k1] }
func (e rawEntry) val(s string) RawValue { return RawValue(s[e.k1:e.v1]) }

// ParseRawTable reads the AMQP encoding of a header table. It refuses
// (with an error naming the problem) one amqp091-go could not decode.
//
// The table and the strings read from it share b's memory rather than a
// copy of it (a copy was a table's size allocated per delivery): the
// caller must not change b afterwards. A delivery's header bytes are
// written once by the AMQP client and only read after.
func ParseRawTable(b []byte) (*RawTable, error) {
	return parseRawTable(unsafe.String(unsafe.SliceData(b), len(b)))
}

func parseRawTable(s string) (*RawTable, error) {
	if !tableDecodable(s, 0) {
		return nil, fmt.Errorf("broker: header table of %d bytes is not one the AMQP client decodes", len(s))
	}
	t := &RawTable{s: s}
	t.entries, t.safeKeys, t.lookalike = rawEntries(s, t.buf[:0])
	return t, nil
}

// rawEntries appends the entries of the decodable table body s to buf,
// sorted and one per key, and says how appendTable would write them.
func rawEntries(s string, buf []rawEntry) (entries []rawEntry, safeKeys, lookalike bool) {
	entries = buf
	for off := 0; off < len(s); {
		klen := int(s[off])
		rest, err := skipFieldShallow(s[off+1+klen:])
		if err != nil {
			break // not reached for a decodable table
		}
		end := len(s) - len(rest)
		entries = append(entries, rawEntry{uint32(off + 1), uint32(off + 1 + klen), uint32(end)})
		off = end
	}
	// A stable insertion sort keeps repeated keys in table order; the
	// last of each run is the one amqp091-go's map keeps.
	dups := false
	for i := 1; i < len(entries); i++ {
		e, k := entries[i], entries[i].key(s)
		j := i
		for ; j > 0; j-- {
			prev := entries[j-1].key(s)
			if prev <= k {
				dups = dups || prev == k
				break
			}
			entries[j] = entries[j-1]
		}
		entries[j] = e
	}
	out := entries
	if dups {
		out = entries[:0]
		for i, e := range entries {
			if i+1 < len(entries) && entries[i+1].key(s) == e.key(s) {
				continue
			}
			out = append(out, e)
		}
	}
	safeKeys = true
	var keys lookalikeKeys
	for _, e := range out {
		k := e.key(s)
		if safeKeys && !isSafeText(k) {
			safeKeys = false
		}
		keys.add(k)
	}
	return out, safeKeys, keys.lookalike()
}

// lookalikeKeys says, key by key, whether a table would read as a typed
// value of the codec (appendTableOpen wraps such a table): its keys are
// all "type", "value" or "encoding", "type" among them.
type lookalikeKeys struct{ hasType, other bool }

func (l *lookalikeKeys) add(k string) {
	switch k {
	case "type":
		l.hasType = true
	case "value", "encoding":
	default:
		l.other = true
	}
}

func (l lookalikeKeys) lookalike() bool { return l.hasType && !l.other }

// Len is the number of entries.
func (t *RawTable) Len() int { return len(t.entries) }

// Entry returns the i-th entry in key order.
func (t *RawTable) Entry(i int) (key string, v RawValue) {
	e := t.entries[i]
	return e.key(t.s), e.val(t.s)
}

// Get returns the value under key.
func (t *RawTable) Get(key string) (RawValue, bool) {
	return rawGet(t.s, t.entries, key)
}

// rawGet looks key up in the sorted entries of the table body s. The body
// and its entries are apart so that entries held on a caller's stack stay
// there (only s flows into the value).
func rawGet(s string, entries []rawEntry, key string) (RawValue, bool) {
	lo, hi := 0, len(entries)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if entries[m].key(s) < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(entries) && entries[lo].key(s) == key {
		return entries[lo].val(s), true
	}
	return "", false
}

// PlainJSON reports whether AppendJSON writes t as a plain JSON object with
// its keys as they are (PlainJSONTable).
func (t *RawTable) PlainJSON() bool { return t.safeKeys && !t.lookalike }

// Table decodes the entries whose key keep accepts into an amqp.Table, as
// amqp091-go would have decoded them.
func (t *RawTable) Table(keep func(key string) bool) amqp.Table {
	out := amqp.Table{}
	for _, e := range t.entries {
		if k := e.key(t.s); keep(k) {
			out[k] = e.val(t.s).Decode()
		}
	}
	return out
}

// AppendJSON appends the typed JSON encoding of t, the same bytes
// AppendHeadersJSON writes for the amqp.Table amqp091-go decodes from it.
func (t *RawTable) AppendJSON(dst []byte) []byte {
	dst, _, _ = appendRawEntries(dst, t.s, t.entries, t.safeKeys, t.lookalike, "", nil)
	return dst
}

// appendRawEntries writes the table body s (its entries) as typed JSON.
// When mark is one of its keys, dst[from:to] is that member as written
// ("key":value, no comma).
func appendRawEntries(dst []byte, s string, entries []rawEntry, safeKeys, lookalike bool, mark string, markDeaths []Death) (out []byte, from, to int) {
	if len(entries) == 0 {
		return append(dst, '{', '}'), 0, 0
	}
	dst = appendTableOpen(dst, safeKeys, lookalike)
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		marked := mark != "" && e.key(s) == mark
		if marked {
			from = len(dst)
		}
		if safeKeys {
			dst = appendEscaped(dst, e.key(s))
		} else {
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, []byte(e.key(s)))
			dst = append(dst, '"')
		}
		dst = append(dst, ':')
		if marked && markDeaths != nil {
			dst = appendDeathHeaderJSON(dst, markDeaths)
		} else {
			dst = e.val(s).appendJSON(dst)
		}
		if marked {
			to = len(dst)
		}
	}
	dst = append(dst, '}')
	if !safeKeys || lookalike {
		dst = append(dst, '}')
	}
	return dst, from, to
}

// Kind is the value's AMQP field type ('S', 'l', 'F', ...).
func (v RawValue) Kind() byte { return v[0] }

// Text returns a long string's value.
func (v RawValue) Text() (string, bool) {
	if v.Kind() != 'S' {
		return "", false
	}
	return string(v[5:]), true
}

// Int returns an integer's value (any of the signed and unsigned types
// amqp091-go decodes to int8 … int64, uint8 … uint32).
func (v RawValue) Int() (int64, bool) {
	switch v.Kind() {
	case 'b':
		return int64(int8(v[1])), true
	case 'B':
		return int64(v[1]), true
	case 's':
		return int64(int16(be16(v[1:]))), true
	case 'u':
		return int64(be16(v[1:])), true
	case 'I':
		return int64(int32(be32(v[1:]))), true
	case 'i':
		return int64(be32(v[1:])), true
	case 'l':
		return int64(be64(v[1:])), true
	}
	return 0, false
}

// Table reads a nested table.
func (v RawValue) Table() (*RawTable, bool) {
	if v.Kind() != 'F' {
		return nil, false
	}
	t := &RawTable{s: string(v[5:])}
	t.entries, t.safeKeys, t.lookalike = rawEntries(t.s, t.buf[:0])
	return t, true
}

// Decode returns the value as amqp091-go decodes it.
func (v RawValue) Decode() any {
	if n, ok := v.Int(); ok {
		switch v.Kind() {
		case 'b':
			return int8(n)
		case 'B':
			return uint8(n)
		case 's':
			return int16(n)
		case 'u':
			return uint16(n)
		case 'I':
			return int32(n)
		case 'i':
			return uint32(n)
		}
		return n
	}
	switch v.Kind() {
	case 't':
		return v[1] != 0
	case 'f':
		return math.Float32frombits(be32(v[1:]))
	case 'd':
		return math.Float64frombits(be64(v[1:]))
	case 'D':
		return amqp.Decimal{Scale: v[1], Value: int32(be32(v[2:]))}
	case 'T':
		return time.Unix(int64(be64(v[1:])), 0)
	case 'S':
		return string(v[5:])
	case 'x':
		return []byte(v[5:])
	case 'F':
		// Entries in table order: a repeated key keeps its last value,
		// as amqp091-go's map does.
		t := amqp.Table{}
		for s := string(v[5:]); len(s) > 0; {
			klen := int(s[0])
			rest, err := skipFieldShallow(s[1+klen:])
			if err != nil {
				break // not reached in a decodable table
			}
			t[s[1:1+klen]] = RawValue(s[1+klen : len(s)-len(rest)]).Decode()
			s = rest
		}
		return t
	case 'A':
		var arr []any // nil when empty, as amqp091-go leaves it
		for e := range v.elements {
			arr = append(arr, e.Decode())
		}
		return arr
	}
	return nil // 'V'
}

// appendJSON writes v as appendValue writes the value Decode returns.
func (v RawValue) appendJSON(dst []byte) []byte {
	switch v.Kind() {
	case 'V':
		return append(dst, "null"...)
	case 't':
		if v[1] != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case 'b':
		return appendIntJSON(dst, "int8", int64(int8(v[1])))
	case 'B':
		return appendUintJSON(dst, "uint8", uint64(v[1]))
	case 's':
		return appendIntJSON(dst, "int16", int64(int16(be16(v[1:]))))
	case 'u':
		return appendUintJSON(dst, "uint16", uint64(be16(v[1:])))
	case 'I':
		return appendIntJSON(dst, "int32", int64(int32(be32(v[1:]))))
	case 'i':
		return appendUintJSON(dst, "uint32", uint64(be32(v[1:])))
	case 'l':
		return appendIntJSON(dst, "int64", int64(be64(v[1:])))
	case 'f':
		return appendFloatJSON(dst, "float32", float64(math.Float32frombits(be32(v[1:]))), 32)
	case 'd':
		return appendFloatJSON(dst, "float64", math.Float64frombits(be64(v[1:])), 64)
	case 'D':
		return appendDecimalJSON(dst, amqp.Decimal{Scale: v[1], Value: int32(be32(v[2:]))})
	case 'T':
		dst = append(dst, `{"type":"timestamp","value":`...)
		return append(appendTimestamp(dst, time.Unix(int64(be64(v[1:])), 0)), '}')
	case 'S':
		return appendString(dst, string(v[5:]))
	case 'x':
		return appendBytesJSON(dst, string(v[5:]))
	case 'F':
		var buf [16]rawEntry
		s := string(v[5:])
		entries, safeKeys, lookalike := rawEntries(s, buf[:0])
		dst, _, _ = appendRawEntries(dst, s, entries, safeKeys, lookalike, "", nil)
		return dst
	}
	// 'A'
	dst = append(dst, '[')
	first := true
	for e := range v.elements {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = e.appendJSON(dst)
	}
	return append(dst, ']')
}

// elements yields the elements of an array value ('A') in order: the one
// walk over an array's encoding, for every reader of arrays.
func (v RawValue) elements(yield func(RawValue) bool) {
	for s := string(v[5:]); len(s) > 0; {
		rest, err := skipFieldShallow(s)
		if err != nil {
			return // not reached in a decodable table
		}
		if !yield(RawValue(s[:len(s)-len(rest)])) {
			return
		}
		s = rest
	}
}

func be16[T amqpBytes](b T) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }

func be64[T amqpBytes](b T) uint64 { return uint64(be32(b))<<32 | uint64(be32(b[4:])) }
