package broker

import (
	"strconv"
	"strings"
	"time"
)

// ExtractDeathRaw is ExtractDeath over a header table's bytes: the same
// DeathInfo (FuzzRawTable holds the two to it), without decoding x-death's
// entries into tables first. Ingest reads every delivery's death this way.
// It also notes in t whether the deaths say the x-death header exactly,
// so that AppendJSONDeathSpan, given the same Deaths slice, writes the
// header from them instead of walking it again; t is one delivery's, read
// by one goroutine.
func ExtractDeathRaw(t *RawTable) DeathInfo {
	return deathInfo(rawDeaths(t), func(key string) string { return rawText(t.s, t.entries, key) })
}

// rawDeaths is parseDeaths of the table's x-death value: only an array
// has entries, and only its table elements are read.
func rawDeaths(t *RawTable) []Death {
	v, ok := t.Get(deathHeader)
	if !ok || v.Kind() != 'A' {
		return nil
	}
	var deaths []Death
	exact := true
	for ev := range v.elements {
		if ev.Kind() != 'F' {
			exact = false
			continue
		}
		// The entry's own entries, on this stack: an x-death entry has
		// seven or eight keys.
		var buf [10]rawEntry
		body := string(ev[5:])
		entries, _, _ := rawEntries(body, buf[:0])
		exact = exact && exactDeathEntry(body, entries)
		if deaths == nil {
			// Room for the entries RabbitMQ usually writes: one or two.
			deaths = make([]Death, 0, 2)
		}
		deaths = append(deaths, Death{
			Queue:              rawText(body, entries, "queue"),
			Reason:             rawText(body, entries, "reason"),
			Exchange:           rawText(body, entries, "exchange"),
			RoutingKeys:        rawStrings(body, entries),
			Count:              rawInteger(body, entries, "count"),
			Time:               rawTimestamp(body, entries, "time"),
			OriginalExpiration: rawText(body, entries, "original-expiration"),
		})
	}
	if exact {
		t.exact = deaths
	} else {
		t.exact = nil
	}
	return deaths
}

// rawText, rawInteger and rawTimestamp read the entry key of the table
// body s as headerString, HeaderInt and headerTime read its decoded value
// ("", 0, the zero time when there is none).
func rawText(s string, entries []rawEntry, key string) string {
	if v, ok := rawGet(s, entries, key); ok {
		return rawString(v)
	}
	return ""
}

func rawInteger(s string, entries []rawEntry, key string) int64 {
	if v, ok := rawGet(s, entries, key); ok {
		return rawInt(v)
	}
	return 0
}

func rawTimestamp(s string, entries []rawEntry, key string) time.Time {
	if v, ok := rawGet(s, entries, key); ok {
		return rawTime(v)
	}
	return time.Time{}
}

// rawString is headerString of the decoded value: long strings and byte
// arrays are text, anything else is "".
func rawString(v RawValue) string {
	switch v.Kind() {
	case 'S', 'x':
		return string(v[5:])
	}
	return ""
}

// rawStrings is headerStrings of the entry's routing-keys: the text
// elements of an array (strings and byte arrays), a single long string as
// one key, never nil.
func rawStrings(s string, entries []rawEntry) []string {
	v, ok := rawGet(s, entries, "routing-keys")
	if !ok {
		return []string{}
	}
	switch v.Kind() {
	case 'S': // a single key where an array was expected (not a byte array)
		return []string{string(v[5:])}
	case 'A':
	default:
		return []string{}
	}
	out := make([]string, 0, 1)
	for e := range v.elements {
		// headerStrings takes strings and byte arrays alike.
		if k := e.Kind(); k == 'S' || k == 'x' {
			out = append(out, string(e[5:]))
		}
	}
	return out
}

// rawInt is HeaderInt of the decoded value: any integer, or a decimal
// string.
func rawInt(v RawValue) int64 {
	if n, ok := v.Int(); ok {
		return n
	}
	switch v.Kind() {
	case 'S', 'x':
		if n, err := strconv.ParseInt(strings.TrimSpace(string(v[5:])), 10, 64); err == nil {
			return n
		}
	}
	return 0
}

// rawTime is headerTime of the decoded value: a timestamp, or Unix seconds
// of the integer types headerTime takes (int64, int32, uint32).
func rawTime(v RawValue) time.Time {
	var n int64
	switch v.Kind() {
	case 'T':
		n = int64(be64(v[1:]))
	case 'l', 'I', 'i':
		n, _ = v.Int()
	default:
		return time.Time{}
	}
	t := time.Unix(n, 0).UTC()
	if y := t.Year(); y < 1 || y > 9999 || t.IsZero() {
		return time.Time{}
	}
	return t
}

// sameDeaths reports whether a and b are the same record (one slice).
func sameDeaths(a, b []Death) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// exactDeathEntry reports whether an x-death element, the table body s
// with its sorted entries, holds RabbitMQ's keys and nothing else, each of
// the type appendDeathHeaderJSON writes it as, so that the Death read from
// it is written back to the same JSON: count a long, time a timestamp,
// exchange, queue and reason strings, routing-keys an array of strings,
// and original-expiration, when there, a string that is not empty; and
// the time one the record keeps as it is.
func exactDeathEntry(s string, entries []rawEntry) bool {
	const (
		count = 1 << iota
		exchange
		queue
		reason
		routingKeys
		timeKey
		all = count | exchange | queue | reason | routingKeys | timeKey
	)
	seen := 0
	for _, e := range entries {
		v := e.val(s)
		want, bit := byte('S'), 0
		switch e.key(s) {
		case "count":
			want, bit = 'l', count
		case "exchange":
			bit = exchange
		case "queue":
			bit = queue
		case "reason":
			bit = reason
		case "original-expiration":
			if len(v) <= 5 {
				return false // written as "", which the rebuild leaves out
			}
		case "routing-keys":
			want, bit = 'A', routingKeys
		case "time":
			want, bit = 'T', timeKey
		default:
			return false
		}
		if v.Kind() != want {
			return false
		}
		// A time the death record reads otherwise (out of range: zero)
		// is written as the record says, not as the header did.
		if want == 'T' && rawTime(v).Unix() != int64(be64(v[1:])) {
			return false
		}
		if want == 'A' {
			for k := range v.elements {
				if k.Kind() != 'S' {
					return false
				}
			}
		}
		seen |= bit
	}
	return seen == all
}
