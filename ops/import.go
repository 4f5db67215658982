package ops

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/internal/exportline"
	"github.com/dlq/dlq/store"
)

// An import reads an export's lines (ExportLine, and the ExportEnd line,
// which it skips, as it skips blank lines) and stores their messages as
// pending, with replay count 0, keeping where each was first stored
// (store.ImportOrigin: the line's imported_from, or else its origin and
// id). A message stored before under that origin and id is skipped, so
// importing a file twice stores it once.
//
// One request is one transaction (store.ImportMessages): a line that
// cannot be imported fails the request, naming its line number, and
// nothing of it is stored. The request is what the caller sees succeed or
// fail, so it is what must be all or nothing; and since lines imported
// before are skipped, sending a file again after fixing it stores nothing
// twice. A file too large for one transaction goes as several requests
// (dlq import does), each all or nothing.
//
// Lines may carry fields this version does not know (a newer dlq's
// export): they are ignored. A line that is no exported message at all is
// refused, naming what it lacks and what it has that a message does not.

// importLine is what an import reads of a line.
type importLine struct {
	ID               int64               `json:"id"`
	Origin           string              `json:"origin"`
	ImportedFrom     *store.ImportOrigin `json:"imported_from"`
	MessageID        *string             `json:"message_id"`
	SourceQueue      *string             `json:"source_queue"`
	SourceExchange   string              `json:"source_exchange"`
	SourceRoutingKey string              `json:"source_routing_key"`
	DeadLetterQueue  *string             `json:"dead_letter_queue"`
	Reason           *string             `json:"reason"`
	DeathCount       int64               `json:"death_count"`
	Failure          json.RawMessage     `json:"failure"`
	Properties       json.RawMessage     `json:"properties"`
	Headers          json.RawMessage     `json:"headers"`
	Body             *[]byte             `json:"body"`
	FirstFailedAt    *time.Time          `json:"first_failed_at"`
	FailedAt         *time.Time          `json:"failed_at"`
	DeathHistory     json.RawMessage     `json:"death_history"`
	XDeath           json.RawMessage     `json:"x_death"`
	ConversionError  *string             `json:"conversion_error"`
	// Category is kept as exported: the exporting dlq's rules judged the
	// failure; this one's recategorisation job judges again when its rules
	// change.
	Category string `json:"category"`
	// Redacted marks a line exported with masked values (ExportLine).
	Redacted bool `json:"redacted"`
	// Export is the ExportEnd line's one member.
	Export json.RawMessage `json:"export"`
}

// exportFields are the members of an ExportLine.
var exportFields = []string{
	"id", "origin", "imported_from", "message_id", "source_queue", "source_exchange", "source_routing_key",
	"dead_letter_queue", "reason", "death_count", "failure", "properties", "headers", "x_death", "body",
	"body_size", "status", "replay_count", "first_failed_at", "failed_at", "replayed_at", "acknowledged_at",
	"group", "death_history", "last_replay_error", "conversion_error", "category", "auto_exhausted", "edited",
	"redacted",
}

// ImportMessages stores the messages of an export read from r (admin), in
// one transaction. A scoped token imports only into its queues.
func (s *Service) ImportMessages(ctx context.Context, c Caller, r io.Reader) (store.ImportResult, error) {
	p := c.Principal
	if err := Authorize(p, ActImport); err != nil {
		return store.ImportResult{}, err
	}
	lines := bufio.NewReaderSize(r, 64<<10)
	var (
		n   int
		buf []byte
	)
	next := func() (store.ImportMessage, error) {
		for {
			var err error
			buf, err = exportline.Read(lines, buf[:0])
			if errors.Is(err, io.EOF) && len(buf) == 0 {
				return store.ImportMessage{}, io.EOF
			}
			n++
			if errors.Is(err, exportline.ErrTooLong) {
				return store.ImportMessage{}, invalid("line %d: longer than %d bytes", n, exportline.Max)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return store.ImportMessage{}, fmt.Errorf("import: read line %d: %w", n, err)
			}
			if len(bytes.TrimSpace(buf)) == 0 {
				continue
			}
			m, skip, lerr := parseImportLine(buf, p)
			if lerr != nil {
				var e *Error
				if errors.As(lerr, &e) {
					return store.ImportMessage{}, &Error{Kind: e.Kind, Msg: fmt.Sprintf("line %d: %s", n, e.Msg)}
				}
				return store.ImportMessage{}, invalid("line %d: %v", n, lerr)
			}
			if !skip {
				return m, nil
			}
		}
	}
	return s.st.ImportMessages(ctx, next, c.actor())
}

// parseImportLine reads one line: a message to import, or skip for the
// ExportEnd line. The error says what is wrong, without the line number.
func parseImportLine(line []byte, p auth.Principal) (store.ImportMessage, bool, error) {
	var l importLine
	if err := json.Unmarshal(line, &l); err != nil {
		return store.ImportMessage{}, false, fmt.Errorf("not a JSON export line: %s", jsonProblem(err))
	}
	if l.Export != nil {
		var end map[string]json.RawMessage
		if json.Unmarshal(line, &end) == nil && len(end) == 1 {
			return store.ImportMessage{}, true, nil // the ExportEnd line
		}
	}
	if err := requireMembers(&l, line); err != nil {
		return store.ImportMessage{}, false, err
	}
	if err := checkFixedSets(&l); err != nil {
		return store.ImportMessage{}, false, err
	}
	if l.Redacted {
		return store.ImportMessage{}, false, errors.New(`redacted: exported by a token that reads redacted values ("[redacted]" in place of the configured headers and body paths), which would be stored as the message's own; export again with a token of the reveal role (redaction.reveal_role, docs/SECURITY.md)`)
	}
	from := store.ImportOrigin{Origin: l.Origin, ID: l.ID}
	if l.ImportedFrom != nil {
		from = *l.ImportedFrom
	}
	// PostgreSQL writes a uuid in lower case; the store matches what it
	// inserted by that text.
	from.Origin = strings.ToLower(from.Origin)
	if !isUUID(from.Origin) || from.ID <= 0 {
		return store.ImportMessage{}, false, fmt.Errorf("origin %q with id %d does not name a message: an origin is a UUID", from.Origin, from.ID)
	}
	if p.Queues != nil && !p.SeesQueue(*l.SourceQueue) {
		return store.ImportMessage{}, false, forbidden("source_queue: token %s may not import into queue %q", p.Name, *l.SourceQueue)
	}
	props, err := checkTypedJSON(&l)
	if err != nil {
		return store.ImportMessage{}, false, err
	}
	var fail struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	if len(l.Failure) > 0 && string(l.Failure) != "null" {
		if err := json.Unmarshal(l.Failure, &fail); err != nil {
			return store.ImportMessage{}, false, fmt.Errorf("failure is not a failure object: %s", jsonProblem(err))
		}
	} else {
		l.Failure = nil
	}
	switch {
	case string(l.DeathHistory) == "null" || string(l.DeathHistory) == "[]":
		l.DeathHistory = nil
	case len(l.DeathHistory) > 0 && l.DeathHistory[0] != '[':
		return store.ImportMessage{}, false, errors.New("death_history is not a JSON array")
	}
	m := store.NewMessage{
		SourceQueue: *l.SourceQueue, SourceExchange: l.SourceExchange, SourceRoutingKey: l.SourceRoutingKey,
		DeadLetterQueue: *l.DeadLetterQueue, Reason: *l.Reason, DeathCount: l.DeathCount,
		Failure: l.Failure, FailureType: fail.Type, FailureMessage: fail.Message,
		Properties: l.Properties, Headers: l.Headers, Body: *l.Body,
		FirstFailedAt: *l.FirstFailedAt, FailedAt: *l.FailedAt,
	}
	if len(l.XDeath) > 0 && l.XDeath[0] == '[' {
		// The death record as the exporting dlq parsed it; without it,
		// reads derive it from the headers (migration 00070).
		m.XDeath = l.XDeath
	}
	fromProperties(&m, props)
	if l.MessageID != nil && *l.MessageID != "" {
		m.MessageID = *l.MessageID
	}
	if l.ConversionError != nil {
		m.ConversionError = *l.ConversionError
	}
	m.Category = l.Category
	return store.ImportMessage{Message: m, From: from, DeathHistory: l.DeathHistory}, false, nil
}

// requireMembers refuses a line without a member every exported message
// has, naming what it lacks and what it has that no export line has.
func requireMembers(l *importLine, line []byte) error {
	var missing []string
	for _, f := range []struct {
		name    string
		present bool
	}{
		{"id", l.ID > 0}, {"origin", l.Origin != ""}, {"source_queue", l.SourceQueue != nil},
		{"dead_letter_queue", l.DeadLetterQueue != nil}, {"reason", l.Reason != nil},
		{"properties", len(l.Properties) > 0}, {"headers", len(l.Headers) > 0}, {"body", l.Body != nil},
		{"first_failed_at", l.FirstFailedAt != nil}, {"failed_at", l.FailedAt != nil},
	} {
		if !f.present {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		msg := "not an exported message: no " + strings.Join(missing, ", ")
		if unknown := unknownMembers(line); len(unknown) > 0 {
			msg += "; unknown field " + strings.Join(unknown, ", ")
		}
		return errors.New(msg)
	}
	return nil
}

// checkFixedSets refuses a line whose member that the rest of dlq reads as
// one of a fixed set holds another value: the death reason (store.Reasons:
// a filter, a policy and a category rule select by it, and a filter
// refuses any other, so a message stored with one could never be selected
// by its reason) and the failure category (category.All; "" leaves the
// store's default). Every value is checked here, once, before the line
// reaches the store. The error names the member, the value and what is
// allowed; the caller adds the line number.
func checkFixedSets(l *importLine) error {
	if !slices.Contains(store.Reasons, *l.Reason) {
		return fmt.Errorf("reason %q is not one of %s (the death reason as dlq stores it: RabbitMQ's, normalized; fix the line or export it again)",
			*l.Reason, strings.Join(store.Reasons, ", "))
	}
	if l.Category != "" && !category.Valid(l.Category) {
		return fmt.Errorf("category %q is not one of %s", l.Category, strings.Join(category.All, ", "))
	}
	return nil
}

// fromProperties fills what ingest (consumer.Convert) takes from a
// delivery's properties rather than from its headers: the message id and
// correlation id, which store.SearchKeys makes search keys, and the content
// type and encoding, which decide whether the body's words are indexed.
// Without them an imported message would not be found by its correlation
// id, where the dlq it came from finds it.
func fromProperties(m *store.NewMessage, p broker.Properties) {
	m.MessageID, m.CorrelationID = p.MessageID, p.CorrelationID
	m.ContentType, m.ContentEncoding, m.ContentKnown = p.ContentType, p.ContentEncoding, true
}

// checkTypedJSON refuses properties and headers that are not the typed
// JSON objects an export writes, and returns the properties.
func checkTypedJSON(l *importLine) (broker.Properties, error) {
	if l.Properties[0] != '{' {
		return broker.Properties{}, errors.New("properties are not a JSON object")
	}
	props, err := broker.ParsePropertiesJSON(l.Properties)
	if err != nil {
		return broker.Properties{}, fmt.Errorf("properties are not the typed properties of an export: %w", err)
	}
	if l.Headers[0] != '{' {
		return broker.Properties{}, errors.New("headers are not a JSON object")
	}
	if _, err := broker.DecodeHeadersJSON(l.Headers); err != nil {
		return broker.Properties{}, fmt.Errorf("headers are not the typed headers of an export: %w", err)
	}
	return props, nil
}

// unknownMembers lists the members of a JSON object line that no export
// line has.
func unknownMembers(line []byte) []string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(line, &obj) != nil {
		return nil
	}
	var out []string
	for k := range obj {
		if !slices.Contains(exportFields, k) && k != "export" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// jsonProblem describes a decoding error without echoing the input.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s must be %s, not a JSON %s", typ.Field, typ.Type, typ.Value)
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return strings.TrimPrefix(msg, "json: ")
}

// isUUID reports whether s is a UUID in its canonical text form.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
