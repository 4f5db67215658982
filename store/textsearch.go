package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text search (migrations 00078, 00079) finds words across every queue
// through a GIN index over a full-text document of each plain row: the
// failure type, failure message and stack, the application's header
// values, and the first BodyTextMax bytes of a text body. Ingest only
// says which part of a row is text (BodyTextBytes, HeaderText), since SQL
// cannot tell it cheaply, and names the row for the indexer, which
// computes the document (dlq_search_document) off the ingest path
// (textindex.go).
//
// The 'simple' configuration lower-cases words and keeps every one (no
// stemming, no stop words), so a phrase matches as written, in any case.

// BodyTextMax is how many bytes at the start of a text body are indexed:
// a 1 KiB body whole, the start of larger ones (docs/BENCHMARKS.md has
// what indexing costs ingest).
const BodyTextMax = 1024

// headerTextMax bounds the header values indexed per message.
const headerTextMax = 2048

// bodyTextSQL is the searchable document of the row aliased alias, as the
// indexer writes it into message_text and a search computes it for rows
// still waiting for theirs.
func bodyTextSQL(alias string) string {
	return "dlq_search_document(" + alias + ".failure_type, " + alias + ".failure_message, " + alias + ".failure, " +
		alias + ".search_text, " + alias + ".body, " + alias + ".body_text_bytes)"
}

// BodyTextBytes returns how many bytes at the start of body are text to
// index: none when the content type (from the properties JSON) is not a
// text type, or the body is not valid UTF-8, or holds a NUL byte (binary
// data); else the body up to BodyTextMax, cut on a character boundary.
func BodyTextBytes(body []byte, properties json.RawMessage) int {
	if len(body) == 0 || !textContent(properties) {
		return 0
	}
	return textPrefix(body)
}

// textPrefix is BodyTextBytes of a body whose content type is text.
func textPrefix(body []byte) int {
	if bytes.IndexByte(body, 0) >= 0 || !utf8.Valid(body) {
		return 0
	}
	n := min(len(body), BodyTextMax)
	for n > 0 && n < len(body) && !utf8.RuneStart(body[n]) {
		n--
	}
	return n
}

// textContent says whether the content type and encoding in a message's
// properties are those of text: no content type (many publishers set
// none), text/*, or an application type that is text (JSON, XML, YAML,
// CSV, forms, scripts), and no content encoding other than identity (a
// gzip body is binary).
func textContent(properties json.RawMessage) bool {
	if len(properties) == 0 {
		return true
	}
	var p struct {
		ContentType     string `json:"content_type"`
		ContentEncoding string `json:"content_encoding"`
	}
	if json.Unmarshal(properties, &p) != nil {
		return false
	}
	return textContentType(p.ContentType, p.ContentEncoding)
}

// textContentType is textContent from the content type and encoding
// themselves.
func textContentType(contentType, contentEncoding string) bool {
	if enc := strings.ToLower(strings.TrimSpace(contentEncoding)); enc != "" && enc != "identity" && enc != "utf-8" && enc != "utf8" {
		return false
	}
	if strings.TrimSpace(contentType) == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	typ, sub, _ := strings.Cut(mt, "/")
	switch typ {
	case "text":
		return true
	case "application":
		if strings.HasSuffix(sub, "+json") || strings.HasSuffix(sub, "+xml") || strings.HasSuffix(sub, "+yaml") {
			return true
		}
		switch sub {
		case "json", "xml", "yaml", "x-yaml", "csv", "x-ndjson", "ndjson", "jsonl", "x-www-form-urlencoded",
			"javascript", "x-javascript", "graphql", "sql", "toml":
			return true
		}
	}
	return false
}

// HeaderText returns the application's header values to index, one per
// line: strings, at the top level and in tables one level down; not
// RabbitMQ's own death headers, not the failure type, message or stack
// (indexed from their own columns). "" when there are none.
func HeaderText(headers json.RawMessage, failureType, failureMessage, stack string) string {
	var b strings.Builder
	headerText(&b, headers, failureType, failureMessage, stack, 0)
	return b.String()
}

func headerText(b *strings.Builder, table json.RawMessage, failureType, failureMessage, stack string, depth int) {
	if len(table) == 0 || table[0] != '{' {
		return
	}
	var h map[string]json.RawMessage
	if json.Unmarshal(table, &h) != nil {
		return
	}
	// In the keys' order, not the map's: the same headers give the same
	// text each time they are indexed (which values fit under
	// headerTextMax, and which words stand next to each other for a
	// phrase).
	for _, k := range slices.Sorted(maps.Keys(h)) {
		raw := h[k]
		if len(raw) == 0 || b.Len() >= headerTextMax || strings.HasPrefix(k, "x-death") ||
			strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		switch raw[0] {
		case '"':
			var s string
			if json.Unmarshal(raw, &s) != nil || s == "" || s == failureType || s == failureMessage || s == stack {
				continue
			}
			s = cleanText(s)
			room := headerTextMax - b.Len()
			if b.Len() > 0 {
				room-- // the newline before it
			}
			if len(s) > room {
				s = strings.ToValidUTF8(s[:room], "")
			}
			if s == "" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(s)
		case '{':
			// A typed value of the header codec is a number, a time or
			// bytes, whose words are not text; a table one level down is.
			var typed struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(raw, &typed) == nil && typed.Type != "" {
				continue
			}
			if depth == 0 {
				headerText(b, raw, failureType, failureMessage, stack, depth+1)
			}
		}
	}
}

// failureStack is the stack of a failure detail (its "stack" member).
func failureStack(failure json.RawMessage) string {
	if len(failure) == 0 {
		return ""
	}
	var f struct {
		Stack string `json:"stack"`
	}
	_ = json.Unmarshal(failure, &f)
	return f.Stack
}

// bodyTextColumn is body_text_bytes of a plain row written by ingest or
// import: NULL (not looked at) unless the store marks text
// (Config.TextSearch). search_text (the header values) is no longer
// written there: the indexer works it out off the ingest path
// (textindex.go).
func (s *Store) bodyTextColumn(m *NewMessage) *int32 {
	if !s.text {
		return nil
	}
	var n int32
	switch {
	case !m.ContentKnown || !plainProperty(m.ContentType) || !plainProperty(m.ContentEncoding):
		// Properties' JSON holds a property that is not plain text as
		// shown (broker's displayText), which the JSON answers for.
		n = int32(BodyTextBytes(m.Body, m.Properties))
	case len(m.Body) > 0 && textContentType(m.ContentType, m.ContentEncoding):
		// The converter's properties, not their JSON parsed again.
		n = int32(textPrefix(m.Body))
	}
	return &n
}

// plainProperty says whether a property's JSON holds it as it is: valid
// UTF-8 without NUL.
func plainProperty(s string) bool {
	return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s)
}

// TextSearch reports whether the store marks new rows' text for the text
// index (Config.TextSearch).
func (s *Store) TextSearch() bool { return s.text }

// searchText is a plain row's header text (HeaderText), nil when empty.
func searchText(m *NewMessage) *string {
	s := HeaderText(m.Headers, m.FailureType, m.FailureMessage, failureStack(m.Failure))
	if s == "" {
		return nil
	}
	return &s
}

// textQuery is q as a full-text query: a phrase of its words (q's words
// in order, next to each other), the last one a prefix when q ends with
// '*'. Quotes around q change nothing: q is always one phrase.
type textQuery struct {
	phrase string // the words but a trailing prefix, for phraseto_tsquery
	prefix string // the prefix word without its '*', or ""
}

// WordSeparators are the characters dlq_search_words (migration 00078)
// turns into white space, in the document and in q alike.
const WordSeparators = ".-/:@()[]{}=,;\"'<>\\|#$&*+!?~`^%_"

func isWordSeparator(r rune) bool {
	return unicode.IsSpace(r) || strings.ContainsRune(WordSeparators, r)
}

func hasWord(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0
}

// parseTextQuery reads q as a text query; ok is false when q has no word
// to look for (only punctuation).
func parseTextQuery(q string) (tq textQuery, ok bool) {
	t := strings.TrimSpace(q)
	if strings.HasSuffix(t, "*") {
		t = strings.TrimRightFunc(strings.TrimRight(t, "*"), isWordSeparator)
		tq.prefix = t
		if i := strings.LastIndexFunc(t, isWordSeparator); i >= 0 {
			// Past the whole separator: a no-break or ideographic space
			// is more than one byte, and cut in half it made the prefix
			// invalid UTF-8, which PostgreSQL refused.
			_, size := utf8.DecodeRuneInString(t[i:])
			tq.prefix, tq.phrase = t[i+size:], t[:i]
		}
		if !hasWord(tq.prefix) {
			tq.prefix, tq.phrase = "", t
		}
	} else {
		tq.phrase = t
	}
	return tq, tq.prefix != "" || hasWord(tq.phrase)
}

// sql renders the tsquery.
func (tq textQuery) sql(args *sqlArgs) string {
	prefix := ""
	if tq.prefix != "" {
		// The prefix holds no separator, so no quote or backslash:
		// quote_literal makes it one quoted tsquery operand, and none of
		// its characters is read as an operator.
		prefix = "to_tsquery('simple'::regconfig, quote_literal(" + args.add(tq.prefix) + "::text) || ':*')"
	}
	if !hasWord(tq.phrase) {
		return prefix
	}
	phrase := "phraseto_tsquery('simple'::regconfig, dlq_search_words(" + args.add(tq.phrase) + "::text))"
	if prefix == "" {
		return phrase
	}
	return "tsquery_phrase(" + phrase + ", " + prefix + ")"
}

// BackfillText queues for the text index (textindex.go) the plain rows
// without a document with ids in [before-batch, before) up to the
// indexer's mark: rows below it that have none (stored with text search
// off by a dlq from before the mark, whose ingest queued its rows). Rows
// above the mark get theirs as the mark passes them; queued as well, each
// was indexed twice (every row of a database the mark had not walked
// yet, right after an upgrade). before 0 starts just above the mark (or
// the newest message, if lower); next is where the following batch starts, 0
// when every id has been seen; queued is how many rows this batch queued.
// Newest first, since searches show the newest first. Safe beside ingest
// and the indexer, and to rerun: a row indexed twice gets the same
// document.
func (s *Store) BackfillText(ctx context.Context, before int64, batch int) (next int64, queued int, err error) {
	if before <= 0 {
		if err := s.pool.QueryRow(ctx, `
SELECT least(coalesce(max(id), 0), coalesce((SELECT last_id FROM text_index_mark), max(id), 0)) + 1 FROM dead_messages`).Scan(&before); err != nil {
			return 0, 0, fmt.Errorf("store: backfill text: the text indexer's mark: %w", err)
		}
	}
	lo := max(before-int64(batch), 1)
	err = s.pool.QueryRow(ctx, `WITH q AS (
    INSERT INTO text_index_queue (ids)
    SELECT array_agg(m.id ORDER BY m.id) FROM dead_messages m
    WHERE m.id >= $1 AND m.id < $2 AND m.id <= coalesce((SELECT last_id FROM text_index_mark), m.id)
      AND m.enc_key_id IS NULL AND NOT EXISTS (SELECT 1 FROM message_text t WHERE t.id = m.id)
    HAVING count(*) > 0
    RETURNING cardinality(ids) AS n)
SELECT coalesce(sum(n), 0)::int FROM q`, lo, before).Scan(&queued)
	if err != nil {
		return 0, 0, fmt.Errorf("store: backfill text: queue ids %d-%d: %w", lo, before-1, err)
	}
	if lo <= 1 {
		return 0, queued, nil
	}
	return lo, queued, nil
}
