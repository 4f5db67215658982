package ops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"slices"
	"strings"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// Redaction hides configured values from principals: header values by
// name, and values of JSON bodies by path. It applies to every read of a
// message through the layer (listings, single messages, an edit's copy,
// and so every door, the CLI and exports), never to what a replay sends.
type Redaction struct {
	// Headers are header names whose values are masked, in any case.
	Headers []string
	// BodyPaths are JSON body paths whose values are masked (jsonmask.go):
	// card.number, $.user.email, items[*].card.
	BodyPaths []string
	// RevealRole is the least role that sees the real values. Optional;
	// "" masks them for every principal.
	RevealRole string
}

// RedactedValue replaces a masked value: a JSON string wherever it
// stands. An edit that sends it back where a value was masked keeps the
// real value (restoreRedacted).
const RedactedValue = "[redacted]"

var redactedJSON = []byte(`"` + RedactedValue + `"`)

// notJSONBody replaces a body the configured paths cannot be checked in:
// it says JSON, or looks like it, and is not valid JSON.
const notJSONBody = "[redacted: the body is not valid JSON, so the fields configured for redaction cannot be found in it]"

// redactor is a compiled Redaction; nil masks nothing.
type redactor struct {
	headers []string // lower-cased
	paths   []bodyPath
	reveal  string
	// failHeaders: a masked header is one failures are read from;
	// failType, failMessage: one gives a failure its type, its message
	// (redaction_failure.go).
	failHeaders, failType, failMessage bool
}

// CheckBodyPath reports what is wrong with a body path of Redaction, for a
// configuration check before anything starts.
func CheckBodyPath(s string) error {
	_, err := parseBodyPath(s)
	return err
}

func newRedactor(r Redaction) (*redactor, error) {
	if len(r.Headers) == 0 && len(r.BodyPaths) == 0 {
		return nil, nil
	}
	out := &redactor{reveal: r.RevealRole}
	for _, h := range r.Headers {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			out.headers = append(out.headers, h)
			typ, msg := failureFeeds(h)
			out.failHeaders = out.failHeaders || broker.IsFailureHeader(h)
			out.failType, out.failMessage = out.failType || typ, out.failMessage || msg
		}
	}
	for _, s := range r.BodyPaths {
		p, err := parseBodyPath(s)
		if err != nil {
			return nil, fmt.Errorf("ops: redaction: %w", err)
		}
		out.paths = append(out.paths, p)
	}
	if r.RevealRole != "" && !(auth.Principal{Role: r.RevealRole}).Can(auth.RoleViewer) {
		return nil, fmt.Errorf("ops: redaction: reveal role %q must be viewer, operator or admin", r.RevealRole)
	}
	return out, nil
}

// masks reports whether p reads masked values.
func (r *redactor) masks(p auth.Principal) bool {
	return r != nil && (r.reveal == "" || !p.Can(r.reveal))
}

func (r *redactor) header(name string) bool {
	return r != nil && slices.Contains(r.headers, strings.ToLower(name))
}

// message masks m's headers, body and what its failure took from masked
// headers, in place.
func (r *redactor) message(m *store.Message) {
	r.failure(m) // first: it reads the headers' real values
	m.DeathHistory = r.deathHistory(m.DeathHistory)
	m.Headers = r.headersJSON(m.Headers)
	if m.Body != nil && len(r.paths) > 0 {
		b := r.body(*m.Body, contentType(m.Properties))
		m.Body = &b
	}
}

// headersJSON masks the configured headers of a header table's JSON. A
// table the codec wrapped (keys in base64) is decoded to look at its
// names; if one is configured, all of it is masked.
func (r *redactor) headersJSON(hj json.RawMessage) json.RawMessage {
	if r == nil || len(r.headers) == 0 || len(hj) == 0 {
		return hj
	}
	var h map[string]json.RawMessage
	if json.Unmarshal(hj, &h) != nil {
		return hj
	}
	if t, ok := h["type"]; ok && string(t) == `"table"` {
		if tbl, err := broker.DecodeHeadersJSON(hj); err == nil {
			for k := range tbl {
				if r.header(k) {
					return json.RawMessage(`{"` + RedactedValue + `":"` + RedactedValue + `"}`)
				}
			}
		}
		return hj
	}
	changed := false
	for k := range h {
		if r.header(k) {
			h[k] = redactedJSON
			changed = true
		}
	}
	if !changed {
		return hj
	}
	return appendObject(h)
}

// body masks the configured paths of a JSON body (by content type, or,
// without one, by its first byte); other bodies are returned as they are.
func (r *redactor) body(b []byte, ct string) []byte {
	if r == nil || len(r.paths) == 0 || !jsonBody(b, ct) {
		return b
	}
	spans, err := findPaths(b, r.paths)
	if err != nil {
		return []byte(notJSONBody)
	}
	if len(spans) == 0 {
		return b
	}
	return replaceSpans(b, spans, func(found) []byte { return redactedJSON })
}

func jsonBody(b []byte, ct string) bool {
	if ct != "" {
		media, _, _ := mime.ParseMediaType(ct)
		return media == "application/json" || strings.HasSuffix(media, "+json")
	}
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

func contentType(props json.RawMessage) string {
	var p struct {
		ContentType string `json:"content_type"`
	}
	_ = json.Unmarshal(props, &p)
	return p.ContentType
}

// appendObject writes members with their keys in byte order, as the
// header codec does.
func appendObject(members map[string]json.RawMessage) json.RawMessage {
	keys := make([]string, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		kb, _ := json.Marshal(k)
		out = append(append(append(out, kb...), ':'), members[k]...)
	}
	return append(out, '}')
}

// restoreBody puts the real values back where an edited body holds the
// placeholder at a masked path: an edit made from a masked view never
// sends the placeholder. A placeholder where the original has no value
// is refused: there is nothing real to send.
func (r *redactor) restoreBody(edited, original []byte, ct string) ([]byte, error) {
	if r == nil || len(r.paths) == 0 || !jsonBody(edited, ct) {
		return edited, nil
	}
	spans, err := findPaths(edited, r.paths)
	if err != nil {
		return edited, nil // newBody checks validity for JSON content types
	}
	var restore []found
	for _, f := range spans {
		if bytes.Equal(edited[f.start:f.end], redactedJSON) {
			restore = append(restore, f)
		}
	}
	if len(restore) == 0 {
		return edited, nil
	}
	vals := make([][]byte, len(restore))
	for i, f := range restore {
		v, ok := valueAt(original, f.loc)
		if !ok {
			return nil, invalid("body: %s holds %q, the placeholder of a masked value, but the message has no value there to keep: give the real value or remove the field",
				locString(f.loc), RedactedValue)
		}
		vals[i] = v
	}
	i := 0
	return replaceSpans(edited, restore, func(found) []byte { v := vals[i]; i++; return v }), nil
}

func locString(loc []any) string {
	var b strings.Builder
	b.WriteByte('$')
	for _, l := range loc {
		switch v := l.(type) {
		case string:
			b.WriteString("." + v)
		case int:
			fmt.Fprintf(&b, "[%d]", v)
		}
	}
	return b.String()
}

// maskedField returns the redacted body path that a field filter's path
// (store.ParseField) is, lies inside, or holds: then a filter on it
// tells what the masked values are. Array steps are left out on both
// sides, since both reach through arrays (a body path's key applies to
// every element, a field path's key looks into every element, and its
// index picks one or stands for a value that is not an array): the key
// names alone, one a prefix of the other, decide. items.1.pan is refused
// with items[0].pan masked: refusing too much is safe.
func (r *redactor) maskedField(path []store.PathSegment) (bodyPath, bool) {
	var keys []string
	for _, s := range path {
		if !s.IsIndex {
			keys = append(keys, s.Key)
		}
	}
	for _, p := range r.paths {
		var masked []string
		for _, s := range p {
			if s.key != "" {
				masked = append(masked, s.key)
			}
		}
		n := min(len(keys), len(masked))
		if slices.Equal(keys[:n], masked[:n]) {
			return p, true
		}
	}
	return nil, false
}
