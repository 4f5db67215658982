package console

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// The headers and properties tables show an AMQP timestamp as every time
// of the console is shown (fmtTime, with how long ago), not as the RFC
// 3339 text it is stored as: the message page puts them beside its own
// times ("Failed", the timeline), which an on-call compares at a glance.

// shownField is a row of the message page's headers or properties table:
// Time is set for a timestamp, which the page shows as a time; Value of a
// table or an array has the timestamps inside it in the console's format.
type shownField struct {
	field
	Time *time.Time
}

// showFields readies rows of viewFields for the message page. The rows
// keep their stored text elsewhere: a search's snippet matches what is
// stored.
func showFields(rows []field) []shownField {
	out := make([]shownField, len(rows))
	for i, f := range rows {
		out[i].field = f
		switch f.Type {
		case "timestamp":
			if t, ok := parseTimestamp(f.Value); ok {
				out[i].Time = &t
			}
		case "table", "array":
			out[i].Value = nestedTimestamps(f.Value)
		}
	}
	return out
}

// showProperties is showFields for the properties, whose timestamp is
// stored as plain JSON (an RFC 3339 string, or Unix seconds out of its
// range) though AMQP types it a timestamp.
func showProperties(rows []field) []shownField {
	out := showFields(rows)
	for i := range out {
		if out[i].Name != "timestamp" || out[i].Time != nil {
			continue
		}
		if t, ok := parseTimestamp(out[i].Value); ok {
			out[i].Type, out[i].Time = "timestamp", &t
		}
	}
	return out
}

// parseTimestamp reads a timestamp as stored: RFC 3339, or Unix seconds
// (broker's appendTimestamp writes those for a year RFC 3339 cannot
// hold).
func parseTimestamp(s string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0).UTC(), true
	}
	return time.Time{}, false
}

// nestedTimestamps rewrites, in the compact JSON of a table or an array,
// each typed timestamp's value ({"type":"timestamp","value":"…"}) in the
// console's format; the rest of the JSON is kept as it is. Text that does
// not parse is returned unchanged.
func nestedTimestamps(s string) string {
	if !strings.Contains(s, `"timestamp"`) {
		return s
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return s
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false) // the template escapes; \u003c would show as is
	if e.Encode(rewriteTimestamps(v)) != nil {
		return s
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func rewriteTimestamps(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = rewriteTimestamps(x[i])
		}
	case map[string]any:
		if len(x) == 2 && x["type"] == "timestamp" {
			var raw string
			switch val := x["value"].(type) {
			case string:
				raw = val
			case json.Number:
				raw = val.String()
			}
			if t, ok := parseTimestamp(raw); ok {
				x["value"] = fmtTime(t)
				return x
			}
		}
		for k := range x {
			x[k] = rewriteTimestamps(x[k])
		}
	}
	return v
}
