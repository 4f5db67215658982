package broker

import (
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Death is one entry of RabbitMQ's x-death header. RabbitMQ keeps one entry
// per (queue, reason), counts repeats in Count and moves the entry it
// updates to the front, so the array is ordered most recent first.
type Death struct {
	Queue       string   `json:"queue"`
	Reason      string   `json:"reason"` // as RabbitMQ wrote it
	Exchange    string   `json:"exchange"`
	RoutingKeys []string `json:"routing_keys"`
	Count       int64    `json:"count"`
	// Time is the entry's "time": when the message was first dead-lettered
	// from Queue for Reason (RabbitMQ does not move it on repeats).
	Time               time.Time `json:"time"`
	OriginalExpiration string    `json:"original_expiration,omitempty"`
}

// AppendDeathsJSON appends deaths as encoding/json writes them (the API's
// x_death field), without reflection: ingest writes it for every message.
func AppendDeathsJSON(dst []byte, deaths []Death) []byte {
	if deaths == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, d := range deaths {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"queue":`...)
		dst = appendEscaped(dst, d.Queue)
		dst = append(dst, `,"reason":`...)
		dst = appendEscaped(dst, d.Reason)
		dst = append(dst, `,"exchange":`...)
		dst = appendEscaped(dst, d.Exchange)
		dst = append(dst, `,"routing_keys":`...)
		if d.RoutingKeys == nil {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, '[')
			for j, k := range d.RoutingKeys {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = appendEscaped(dst, k)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, `,"count":`...)
		dst = strconv.AppendInt(dst, d.Count, 10)
		// time.Time's MarshalJSON, for the years 0–9999 it accepts.
		dst = append(dst, `,"time":"`...)
		dst = d.Time.AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
		if d.OriginalExpiration != "" {
			dst = append(dst, `,"original_expiration":`...)
			dst = appendEscaped(dst, d.OriginalExpiration)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// DeathInfo is what dlq stores about how a message died.
type DeathInfo struct {
	// Reason of the most recent death, one of rejected, expired, maxlen,
	// delivery_limit, or unknown (no death headers, or a reason RabbitMQ
	// does not define: the set stays small enough for a metric label).
	Reason           string
	SourceQueue      string
	SourceExchange   string // "" is the default exchange, kept as is for replay
	SourceRoutingKey string // first routing key of the most recent death, "" if none
	Count            int64  // count of the most recent death's entry; >= 1 when dead-lettered, 0 when no death headers
	// FirstTime and LastTime are the earliest and latest x-death times, UTC
	// (zero when unknown). Entry times are first occurrences, so LastTime is
	// when the most recent (queue, reason) pair first happened, not
	// necessarily this very death; the ingest time is the better "failed at".
	FirstTime time.Time
	LastTime  time.Time
	Deaths    []Death // every well-formed x-death entry, most recent first
}

// Death reasons as DeathInfo reports them.
const (
	reasonRejected      = "rejected"
	reasonExpired       = "expired"
	reasonMaxLen        = "maxlen"
	reasonDeliveryLimit = "delivery_limit"
	reasonUnknown       = "unknown"
)

// ExtractDeath reads RabbitMQ's death headers. The most recent death decides
// the source and reason: x-death[0], else x-last-death-* (RabbitMQ 3.13+),
// else x-first-death-* (3.10+). It never panics: a client may have put
// anything under these names, and wrong types read as absent.
func ExtractDeath(h amqp.Table) DeathInfo {
	return deathInfo(parseDeaths(h["x-death"]), func(key string) string { return headerString(h[key]) })
}

// deathInfo is ExtractDeath's rule over the x-death entries and a
// reader of the other death headers' text (ExtractDeathRaw reads both
// from a table's bytes).
func deathInfo(deaths []Death, text func(key string) string) DeathInfo {
	info := DeathInfo{Reason: reasonUnknown, Deaths: deaths}
	for _, d := range info.Deaths {
		if d.Time.IsZero() {
			continue
		}
		if info.FirstTime.IsZero() || d.Time.Before(info.FirstTime) {
			info.FirstTime = d.Time
		}
		if d.Time.After(info.LastTime) {
			info.LastTime = d.Time
		}
	}

	// Each source is taken whole: mixing fields of different deaths would
	// pair one death's queue with another's exchange (and "" is a real
	// exchange name, so "empty" cannot mean "missing" field by field).
	if len(info.Deaths) > 0 && (info.Deaths[0].Queue != "" || info.Deaths[0].Reason != "") {
		d := info.Deaths[0]
		info.Reason = normalizeReason(d.Reason)
		info.SourceQueue = d.Queue
		info.SourceExchange = d.Exchange
		if len(d.RoutingKeys) > 0 {
			info.SourceRoutingKey = d.RoutingKeys[0]
		}
		info.Count = max(d.Count, 1)
		return info
	}
	for _, prefix := range [...]string{"x-last-death-", "x-first-death-"} {
		queue := text(prefix + "queue")
		reason := text(prefix + "reason")
		if queue == "" && reason == "" {
			continue
		}
		info.Reason = normalizeReason(reason)
		info.SourceQueue = queue
		info.SourceExchange = text(prefix + "exchange")
		info.Count = 1
		// x-death may still hold the matching entry further down.
		for _, d := range info.Deaths {
			if d.Queue == queue && d.Reason == reason {
				info.Count = max(d.Count, 1)
				if len(d.RoutingKeys) > 0 {
					info.SourceRoutingKey = d.RoutingKeys[0]
				}
				break
			}
		}
		return info
	}
	return info
}

// normalizeReason maps RabbitMQ's reason names, in any case, to the fixed
// set; anything else is unknown.
func normalizeReason(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "rejected":
		return reasonRejected
	case "expired":
		return reasonExpired
	case "maxlen":
		return reasonMaxLen
	case "delivery_limit", "delivery-limit":
		return reasonDeliveryLimit
	}
	return reasonUnknown
}

// parseDeaths reads an x-death value. Entries that are not tables are
// skipped; an absent or malformed array gives nil.
func parseDeaths(v any) []Death {
	var entries []any
	switch a := v.(type) {
	case []any:
		entries = a
	case []amqp.Table: // never on the wire, but easy for a Go caller to build
		entries = make([]any, len(a))
		for i, t := range a {
			entries[i] = t
		}
	default:
		return nil
	}
	deaths := make([]Death, 0, len(entries))
	for _, e := range entries {
		t, ok := asTable(e)
		if !ok {
			continue
		}
		d := Death{
			Queue:              headerString(t["queue"]),
			Reason:             headerString(t["reason"]),
			Exchange:           headerString(t["exchange"]),
			RoutingKeys:        headerStrings(t["routing-keys"]),
			Count:              HeaderInt(t["count"]),
			Time:               headerTime(t["time"]),
			OriginalExpiration: headerString(t["original-expiration"]),
		}
		deaths = append(deaths, d)
	}
	if len(deaths) == 0 {
		return nil
	}
	return deaths
}

func asTable(v any) (amqp.Table, bool) {
	switch t := v.(type) {
	case amqp.Table:
		return t, true
	case map[string]any:
		return amqp.Table(t), true
	}
	return nil, false
}

// headerString reads a text header value; AMQP clients send text as longstr
// (string) or, some of them, as a byte array.
func headerString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}

// headerStrings reads an array of text values, skipping anything else. It
// returns a non-nil slice so that JSON shows [] rather than null.
func headerStrings(v any) []string {
	out := []string{}
	switch a := v.(type) {
	case []any:
		for _, e := range a {
			switch e.(type) {
			case string, []byte:
				out = append(out, headerString(e))
			}
		}
	case []string:
		out = append(out, a...)
	case string: // a single key where an array was expected
		out = append(out, a)
	}
	return out
}

// HeaderInt reads an integer of any AMQP width, or a decimal string (one
// out of int64's range is no number): 0 when v is none of these.
func HeaderInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int16:
		return int64(n)
	case int8:
		return int64(n)
	case int:
		return int64(n)
	case uint8:
		return int64(n)
	case uint16:
		return int64(n)
	case uint32:
		return int64(n)
	case string, []byte:
		i, err := strconv.ParseInt(strings.TrimSpace(headerString(n)), 10, 64)
		if err == nil {
			return i
		}
	}
	return 0
}

// headerTime reads an AMQP timestamp, or Unix seconds of an integer type,
// in UTC. Anything else is the zero time.
func headerTime(v any) time.Time {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x.UTC()
	case int64, int32, uint32, int:
		t = time.Unix(HeaderInt(x), 0).UTC()
	}
	// Outside years 1–9999 a time cannot be written as RFC 3339 (and
	// encoding/json refuses it): garbage, read as absent.
	if y := t.Year(); y < 1 || y > 9999 || t.IsZero() {
		return time.Time{}
	}
	return t
}
