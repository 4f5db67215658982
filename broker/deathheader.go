package broker

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"
)

// The x-death header is stored once. A dead letter's header table carries
// it as RabbitMQ wrote it, and the row's death record (x_death,
// AppendDeathsJSON) says the same thing: stored twice, it was about 430
// bytes of a 1 KiB dead letter's 2,980-byte row, an eighth of the WAL
// PostgreSQL writes for it (docs/BENCHMARKS.md, Ingest). So ingest leaves
// the member out of the stored headers when the death record rebuilds it
// byte for byte (RawTable.AppendJSONDeathSpan), and every read of a row
// puts it back (RestoreDeathHeader). A header that is not RabbitMQ's usual
// shape (other types, extra fields, text that is not UTF-8) is stored
// whole, as before.

// deathHeader is the header both halves are about.
const deathHeader = "x-death"

// Span is the part [From, To) of a JSON text; From == To is none.
type Span struct{ From, To int }

// Empty reports whether s covers nothing.
func (s Span) Empty() bool { return s.From >= s.To }

// AppendJSONDeathSpan is AppendJSON, and also returns the part of what it
// appended that a stored row may leave out, given deaths, the death record
// read from t (ExtractDeathRaw): the x-death member with the comma joining
// it to a neighbour. RestoreDeathHeader(without the span, AppendDeathsJSON(deaths))
// gives back what AppendJSON wrote (FuzzDeathHeader holds it). The span is
// empty when that could not be so: no x-death, a table not written as a
// plain object, an x-death the death record does not say exactly, or a
// table whose other keys would then read as a typed value.
//
// When deaths is the record ExtractDeathRaw read from t and it says the
// header exactly (every element a table of RabbitMQ's keys, each of the
// type RabbitMQ writes: exactDeathEntry), the header's JSON is written
// from deaths (appendDeathHeaderJSON), which then gives the same bytes
// as walking it; otherwise it is walked and the rebuild compared.
func (t *RawTable) AppendJSONDeathSpan(dst []byte, deaths []Death) ([]byte, Span) {
	plain := t.PlainJSON() && rebuildable(deaths) && !t.lookalikeWithout(deathHeader)
	var exact []Death
	if plain && sameDeaths(deaths, t.exact) {
		exact = deaths
	}
	out, from, to := appendRawEntries(dst, t.s, t.entries, t.safeKeys, t.lookalike, deathHeader, exact)
	if from == to || !plain {
		return out, Span{}
	}
	var buf [1024]byte
	if exact == nil && !bytes.Equal(out[from+len(deathHeader)+3:to], appendDeathHeaderJSON(buf[:0], deaths)) {
		return out, Span{}
	}
	switch {
	case out[from-1] == ',':
		from--
	case out[to] == ',':
		to++
	}
	return out, Span{from, to}
}

// lookalikeWithout reports whether the table's other entries than key
// would be written as a typed value's lookalike (rawEntries): then the
// stored text without key would read as one.
func (t *RawTable) lookalikeWithout(key string) bool {
	var keys lookalikeKeys
	for _, e := range t.entries {
		if k := e.key(t.s); k != key {
			keys.add(k)
		}
	}
	return keys.lookalike()
}

// rebuildable reports whether the death record of deaths, as
// AppendDeathsJSON writes and encoding/json reads it back, keeps every
// value appendDeathHeaderJSON writes: text that is UTF-8 and times
// RFC 3339 can write.
func rebuildable(deaths []Death) bool {
	if len(deaths) == 0 {
		return false
	}
	for _, d := range deaths {
		if !utf8.ValidString(d.Queue) || !utf8.ValidString(d.Reason) || !utf8.ValidString(d.Exchange) ||
			!utf8.ValidString(d.OriginalExpiration) {
			return false
		}
		for _, k := range d.RoutingKeys {
			if !utf8.ValidString(k) {
				return false
			}
		}
		if sec := d.Time.Unix(); sec < minRFC3339Unix || sec > maxRFC3339Unix || d.Time.Nanosecond() != 0 {
			return false
		}
	}
	return true
}

// appendDeathHeaderJSON appends the typed JSON AppendHeadersJSON writes for
// the x-death header RabbitMQ sends with deaths: an array of tables whose
// keys are in order, count a long, time a timestamp, the rest strings.
func appendDeathHeaderJSON(dst []byte, deaths []Death) []byte {
	dst = append(dst, '[')
	for i, d := range deaths {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"count":`...)
		dst = appendIntJSON(dst, "int64", d.Count)
		dst = append(dst, `,"exchange":`...)
		dst = appendString(dst, d.Exchange)
		if d.OriginalExpiration != "" {
			dst = append(dst, `,"original-expiration":`...)
			dst = appendString(dst, d.OriginalExpiration)
		}
		dst = append(dst, `,"queue":`...)
		dst = appendString(dst, d.Queue)
		dst = append(dst, `,"reason":`...)
		dst = appendString(dst, d.Reason)
		dst = append(dst, `,"routing-keys":[`...)
		for j, k := range d.RoutingKeys {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
		}
		dst = append(dst, `],"time":{"type":"timestamp","value":`...)
		dst = append(appendTimestamp(dst, d.Time), '}', '}')
	}
	return append(dst, ']')
}

// RestoreDeathHeader returns a stored row's headers with the x-death member
// ingest left out (AppendJSONDeathSpan) put back, rebuilt from the row's
// death record xDeath. Headers that have an x-death member, are not a
// plain object (a table written with base64 keys, or as a typed value's
// lookalike), or a death record without entries are returned as they
// are: a row stored whole, by this version or an earlier one, reads as it
// was stored.
func RestoreDeathHeader(headers, xDeath []byte) []byte {
	if len(xDeath) < 3 || xDeath[0] != '[' || bytes.Equal(xDeath, []byte("[]")) {
		return headers
	}
	at, ok := deathHeaderPlace(headers)
	if !ok {
		return headers
	}
	deaths, ok := parseDeathRecord(xDeath)
	if !ok && json.Unmarshal(xDeath, &deaths) != nil {
		return headers
	}
	if len(deaths) == 0 {
		return headers
	}
	out := make([]byte, 0, len(headers)+len(deathHeader)+4+256*len(deaths))
	out = append(out, headers[:at]...)
	tail := headers[at] == '}'
	if tail && !emptyObjectBefore(headers, at) {
		out = append(out, ',')
	}
	out = append(out, `"`+deathHeader+`":`...)
	out = appendDeathHeaderJSON(out, deaths)
	if !tail {
		out = append(out, ',')
	}
	return append(out, headers[at:]...)
}

// emptyObjectBefore reports whether only the object's '{' (and space)
// comes before at.
func emptyObjectBefore(b []byte, at int) bool {
	return len(bytes.TrimSpace(b[:at])) == 1
}

// deathHeaderPlace returns where in the header table's JSON text an
// x-death member belongs (keys are written in order): the start of the
// first member whose key sorts after it, or the closing '}'. ok is false
// when the text already has one, or is not a plain object of members.
func deathHeaderPlace(b []byte) (at int, ok bool) {
	p := jsonParser{b: b}
	p.space()
	if p.i >= len(b) || b[p.i] != '{' {
		return 0, false
	}
	p.i++
	p.space()
	if p.i < len(b) && b[p.i] == '}' {
		return p.i, true
	}
	at = -1
	var keys lookalikeKeys
	for {
		p.space()
		start := p.i
		if p.i >= len(b) || b[p.i] != '"' {
			return 0, false
		}
		k, ok := p.key()
		if !ok || k == deathHeader {
			return 0, false
		}
		if at < 0 && k > deathHeader {
			at = start
		}
		keys.add(k)
		p.space()
		if p.i >= len(b) || b[p.i] != ':' {
			return 0, false
		}
		p.i++
		p.space()
		if !p.skip() {
			return 0, false
		}
		p.space()
		if p.i >= len(b) {
			return 0, false
		}
		switch b[p.i] {
		case ',':
			p.i++
			continue
		case '}':
		default:
			return 0, false
		}
		break
	}
	if keys.lookalike() {
		return 0, false
	}
	if at < 0 {
		at = p.i
	}
	return at, true
}

// parseDeathRecord reads a death record as AppendDeathsJSON writes it,
// without reflection: a console page reads hundreds. ok is false for any
// other text (the caller then asks encoding/json).
func parseDeathRecord(b []byte) (deaths []Death, ok bool) {
	p := jsonParser{b: b}
	if len(b) == 0 || b[0] != '[' {
		return nil, false
	}
	p.i++
	for p.i < len(b) && b[p.i] != ']' {
		if len(deaths) > 0 {
			if b[p.i] != ',' {
				return nil, false
			}
			p.i++
		}
		d, ok := p.death()
		if !ok {
			return nil, false
		}
		deaths = append(deaths, d)
	}
	return deaths, p.i == len(b)-1
}

// death reads one entry of a death record (parseDeathRecord).
func (p *jsonParser) death() (d Death, ok bool) {
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return d, false
	}
	p.i++
	for first := true; p.i < len(p.b) && p.b[p.i] != '}'; first = false {
		if !first {
			if p.b[p.i] != ',' {
				return d, false
			}
			p.i++
		}
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return d, false
		}
		k, ok := p.key()
		if !ok || p.i >= len(p.b) || p.b[p.i] != ':' {
			return d, false
		}
		p.i++
		if p.i >= len(p.b) {
			return d, false
		}
		switch k {
		case "queue":
			d.Queue, ok = p.text()
		case "reason":
			d.Reason, ok = p.text()
		case "exchange":
			d.Exchange, ok = p.text()
		case "original_expiration":
			d.OriginalExpiration, ok = p.text()
		case "routing_keys":
			d.RoutingKeys, ok = p.texts()
		case "count":
			var n any
			if n, ok = p.number(); ok {
				d.Count, ok = parseInt64(n.(json.Number))
			}
		case "time":
			var s string
			if s, ok = p.text(); ok {
				var err error
				d.Time, err = time.Parse(time.RFC3339Nano, s)
				ok = err == nil
			}
		default:
			return d, false
		}
		if !ok {
			return d, false
		}
	}
	if p.i >= len(p.b) {
		return d, false
	}
	p.i++ // }
	return d, true
}

// text reads a string value.
func (p *jsonParser) text() (string, bool) {
	if p.b[p.i] != '"' {
		return "", false
	}
	return p.str()
}

// texts reads an array of strings, or null (nil).
func (p *jsonParser) texts() ([]string, bool) {
	if p.literal("null") {
		return nil, true
	}
	if p.b[p.i] != '[' {
		return nil, false
	}
	p.i++
	out := []string{}
	for p.i < len(p.b) && p.b[p.i] != ']' {
		if len(out) > 0 {
			if p.b[p.i] != ',' {
				return nil, false
			}
			p.i++
		}
		if p.i >= len(p.b) {
			return nil, false
		}
		s, ok := p.text()
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	if p.i >= len(p.b) {
		return nil, false
	}
	p.i++ // ]
	return out, true
}

func parseInt64(n json.Number) (int64, bool) {
	v, err := strconv.ParseInt(string(n), 10, 64)
	return v, err == nil
}

// key reads an object's key at p.i (its opening quote). A key without
// escapes is returned as a view of the text, not a copy: it is only
// compared.
func (p *jsonParser) key() (string, bool) {
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return unsafe.String(&p.b[start], j-start), true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return p.str()
		}
	}
	return "", false
}

// skip moves past the value at p.i without building it. The text is a
// json column's, which PostgreSQL validated: skip only finds its end.
func (p *jsonParser) skip() bool {
	if p.i >= len(p.b) {
		return false
	}
	switch p.b[p.i] {
	case '"':
		for p.i++; p.i < len(p.b); p.i++ {
			switch p.b[p.i] {
			case '\\':
				p.i++
			case '"':
				p.i++
				return true
			}
		}
		return false
	case '{', '[':
		depth := 0
		for ; p.i < len(p.b); p.i++ {
			switch p.b[p.i] {
			case '"':
				if !p.skip() {
					return false
				}
				p.i--
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					p.i++
					return true
				}
			}
		}
		return false
	}
	for start := p.i; p.i < len(p.b); p.i++ {
		switch p.b[p.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return p.i > start
		}
	}
	return true
}
