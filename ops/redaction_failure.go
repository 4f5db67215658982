package ops

import (
	"encoding/json"
	"maps"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// A failure's text is read from headers (broker.ExtractFailure): its
// message is the value of x-error-message, its stack that of
// x-exception-stacktrace, and so on. A masked header's value must not
// show through the failure made of it, nor through what is made of
// failures: failure groups' pattern and sample, and the earlier deaths a
// message keeps.

// failureFeeds reports whether header h, on its own, gives a failure its
// type, and its message. Each convention's type and message headers are
// enough for ExtractFailure to take the convention, so a header alone
// tells; a Spring stack gives the type too (the class is read from it).
func failureFeeds(h string) (typ, msg bool) {
	if !broker.IsFailureHeader(h) {
		return false, false
	}
	f := broker.ExtractFailure(amqp.Table{h: "x"}, broker.Properties{})
	return f.Type != "", f.Message != ""
}

// failure masks the parts of m's failure that masked headers gave it: a
// part is masked when ExtractFailure gives it another value once the
// masked headers' values are replaced, which holds wherever a part came
// from (a header of any convention, a type read from a masked stack, a
// detail in extra). Headers that cannot be read mask every part. It reads
// the headers' real values: call it before they are masked.
func (r *redactor) failure(m *store.Message) {
	if !r.failHeaders || len(m.Failure) == 0 || string(m.Failure) == "null" {
		return
	}
	changed := func(string) bool { return true }
	if h, err := broker.DecodeHeadersJSON(m.Headers); err == nil {
		masked := maps.Clone(h)
		hit := false
		for k := range masked {
			if r.header(k) && broker.IsFailureHeader(k) {
				masked[k], hit = RedactedValue, true
			}
		}
		if !hit {
			return
		}
		props, _ := broker.ParsePropertiesJSON(m.Properties)
		changed = failureChanged(broker.ExtractFailure(h, props), broker.ExtractFailure(masked, props))
	}
	var stored map[string]json.RawMessage
	if json.Unmarshal(m.Failure, &stored) != nil {
		m.Failure = nil
		return
	}
	for k, v := range stored {
		switch k {
		case "extra":
			stored[k] = maskExtra(v, changed)
		case "at":
			if changed(k) {
				delete(stored, k) // a time: a placeholder would not read as one
			}
		default:
			if changed(k) {
				stored[k] = redactedJSON
			}
		}
	}
	m.Failure = appendObject(stored)
}

// failureChanged compares what ExtractFailure read with the real header
// values (a) and with the masked ones (b), by the failure's JSON member
// names; "extra.<name>" for a detail. A member it does not know counts as
// changed.
func failureChanged(a, b broker.Failure) func(string) bool {
	return func(k string) bool {
		switch k {
		case "type":
			return a.Type != b.Type
		case "message":
			return a.Message != b.Message
		case "stack":
			return a.Stack != b.Stack
		case "origin":
			return a.Origin != b.Origin
		case "at":
			return (a.At == nil) != (b.At == nil) || (a.At != nil && !a.At.Equal(*b.At))
		}
		if name, ok := strings.CutPrefix(k, "extra."); ok {
			va, oka := a.Extra[name]
			vb, okb := b.Extra[name]
			return va != vb || oka != okb
		}
		return true
	}
}

// maskExtra masks the details of a failure's extra that changed.
func maskExtra(v json.RawMessage, changed func(string) bool) json.RawMessage {
	var extra map[string]json.RawMessage
	if json.Unmarshal(v, &extra) != nil {
		return redactedJSON
	}
	for name := range extra {
		if changed("extra." + name) {
			extra[name] = redactedJSON
		}
	}
	return appendObject(extra)
}

// deathHistory masks the failure type and message of a message's earlier
// deaths when a masked header gives failures their type or message: an
// earlier death does not keep the headers it came with, so which header
// its text came from is not known.
func (r *redactor) deathHistory(dh json.RawMessage) json.RawMessage {
	if !r.failType && !r.failMessage || len(dh) <= len("[]") || string(dh) == "null" {
		return dh
	}
	var deaths []map[string]json.RawMessage
	if json.Unmarshal(dh, &deaths) != nil {
		return json.RawMessage(`[]`)
	}
	for _, d := range deaths {
		for k, on := range map[string]bool{"failure_type": r.failType, "failure_message": r.failMessage} {
			if v, ok := d[k]; on && ok && string(v) != "null" && string(v) != `""` {
				d[k] = redactedJSON
			}
		}
	}
	out := []byte{'['}
	for i, d := range deaths {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, appendObject(d)...)
	}
	return append(out, ']')
}

// group masks a failure group's text when a masked header gives failures
// their message (the pattern and the sample are a failure message) or
// their type: a group keeps no headers, so which header its text came
// from is not known.
func (r *redactor) group(g *store.Group) {
	mask := func(s *string) {
		if *s != "" {
			*s = RedactedValue
		}
	}
	if r.failMessage {
		mask(&g.Pattern)
		mask(&g.SampleMessage)
	}
	if r.failType {
		mask(&g.FailureType)
	}
}
