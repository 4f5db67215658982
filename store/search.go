package store

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlq/dlq/crypt"
)

// Search (q) has three parts, each backed by what ingest can afford:
//
//   - Keys: the message id and correlation id, the variable values of
//     the failure message (ids, numbers, quoted values) and the values of
//     the application's headers, at most maxSearchKeys in that order
//     (SearchKeys), lower-cased, stored in dead_messages.search_keys by
//     ingest and import (a sealed row keeps only their keyed hashes:
//     seal.go).
//     The GIN index is over their 64-bit hashes (search_hashes, KeyHash),
//     not the text: a bigint entry costs ingest about a third less than a
//     text one (docs/BENCHMARKS.md, API). A query probes the hashes and
//     checks the keys themselves, so a hash collision never shows a wrong
//     message. q matches a key exactly, case-insensitively: paste a
//     message id, a trace id, an order number.
//   - Failure text: failure groups whose type or masked pattern contains q
//     (the groups table is small). When q is in the fixed text, every
//     message of the group matches ("declined by issuer", "Timeout"); when
//     q matches only once its variable parts are masked ("took 1500ms"),
//     messages of the group that have those values as keys, checked
//     against q (case-insensitive substring). The listing reads each part
//     through its own index (search_page.go); matches is the same parts as
//     one condition on a row, for counts, bulk actions and replays.
//   - Words, across every queue: q as a phrase (a trailing '*' makes its
//     last word a prefix) in the failure type, message and stack, the
//     header values and the start of text bodies, through the text index
//     (message_text, written off the ingest path by the indexer:
//     textindex.go, migration 00079), and the newest rows still waiting
//     for their documents one by one. Sealed rows are never in it.
//   - Body bytes: with a source queue in the filter, any substring of the
//     body's bytes (case-sensitive). Bytes are not indexed; this scans the
//     queue's messages, best narrowed with failed_after.

// MinQueryLen is the shortest q accepted.
const MinQueryLen = 3

// Key limits: a few short keys per message keep the GIN index cheap to
// maintain (every key is an entry ingest writes). When a message has more
// values than maxSearchKeys, which are kept is decided by SearchKeys'
// order, never by chance, so that the same header is searchable in every
// message of the same shape (docs/API.md, Search).
const (
	maxSearchKeys   = 16
	maxSearchKeyLen = 128
)

// KeyHash is a search key's entry in the GIN index: the first 8 bytes of
// its MD5, big-endian. Migration 00050 computes the same value in SQL,
// ('x' || left(md5(key), 16))::bit(64)::bigint, for rows written before
// it; TestKeyHashMatchesSQL holds the two together.
func KeyHash(key string) int64 {
	sum := md5.Sum([]byte(key))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// KeyHashes returns the KeyHash of each key, in order.
func KeyHashes(keys []string) []int64 {
	if keys == nil {
		return nil
	}
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = KeyHash(k)
	}
	return out
}

// hasKeys renders the condition that the row aliased alias has every one
// of keys: the hashes for the GIN index, then the keys themselves. When
// the store seals (sq.index), a sealed row has no plain keys, only keyed
// hashes, which are matched alone (64 bits of HMAC: a collision is not a
// practical concern).
func (sq searchQuery) hasKeys(a *sqlArgs, alias string, keys ...string) string {
	plain := alias + ".search_hashes @> " + a.add(KeyHashes(keys)) + "::bigint[] AND " +
		alias + ".search_keys @> " + a.add(keys) + "::text[]"
	if sq.index == nil {
		return plain
	}
	return "((" + plain + ") OR " + alias + ".search_hashes @> " + a.add(sq.index.Keys(keys)) + "::bigint[])"
}

// keyHashes is every hash a row having key may carry: plain, and keyed
// when the store seals.
func (sq searchQuery) keyHashes(key string) []int64 {
	if sq.index == nil {
		return []int64{KeyHash(key)}
	}
	return []int64{KeyHash(key), sq.index.Key(key)}
}

// SearchKeys returns the search keys of a message (see above), at most
// maxSearchKeys, chosen in this order: the message id and correlation id
// (what a user pastes most), the variable values of the failure message
// (few, and the only way to a failure's ids once text is sealed), then
// header values in the sorted order of their keys (a nested table's values
// at its key's place, in its own key order). Ingest, import and rekey all
// come here, so a message gets the same keys whichever path stored it.
func SearchKeys(m *NewMessage) []string {
	ks := keySet{keys: make([]string, 0, 8)}
	ks.add(m.MessageID)
	ks.add(m.CorrelationID)
	failureKeys(m.FailureMessage, ks.add)
	// The converter's values come in the order of a map or of the wire:
	// taken as they are only when all of them fit, which makes the order
	// irrelevant; otherwise the headers are read again, in key order. That
	// parse costs what the converter saved, but only for messages with more
	// header values than keys left.
	if m.HeaderValues != nil && len(m.HeaderValues) <= maxSearchKeys-len(ks.keys) {
		for _, v := range m.HeaderValues {
			if v != m.FailureType && v != m.FailureMessage {
				ks.add(v)
			}
		}
	} else {
		headerKeys(m.Headers, m.FailureType, m.FailureMessage, ks.add)
	}
	return ks.keys
}

// keySet collects search keys: lower-cased, trimmed, deduplicated, each
// of a useful length, at most maxSearchKeys (the first ones added win).
// With so few keys a scan finds a duplicate sooner than a map would be
// made, for every message ingest stores.
type keySet struct {
	keys []string
}

func (ks *keySet) add(s string) {
	if len(ks.keys) >= maxSearchKeys {
		return
	}
	s = strings.ToLower(strings.TrimSpace(cleanText(s)))
	if len(s) < 2 || len(s) > maxSearchKeyLen || slices.Contains(ks.keys, s) {
		return
	}
	ks.keys = append(ks.keys, s)
}

// headerKeys adds the header values that identify a message, in the
// sorted order of their keys: strings and integers, at the top level and
// in tables one level down; not RabbitMQ's own death headers, not the
// failure text (searched through groups), not long values (stack traces).
func headerKeys(headers json.RawMessage, failureType, failureMessage string, add func(string)) {
	headerTableKeys(headers, failureType, failureMessage, add, 0)
}

func headerTableKeys(table json.RawMessage, failureType, failureMessage string, add func(string), depth int) {
	if len(table) == 0 || table[0] != '{' {
		return
	}
	var h map[string]json.RawMessage
	if json.Unmarshal(table, &h) != nil {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		raw := h[k]
		if len(raw) == 0 || strings.HasPrefix(k, "x-death") ||
			strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		switch raw[0] {
		case '"':
			var s string
			if len(raw) <= 2*maxSearchKeyLen && json.Unmarshal(raw, &s) == nil && s != failureType && s != failureMessage {
				add(s)
			}
		case '{':
			// A typed value of the header codec (integers, base64
			// strings, wrapped tables), or a table with a "type" key,
			// which the codec may wrap too: only integers are keys.
			var typed struct {
				Type  string          `json:"type"`
				Value json.RawMessage `json:"value"`
			}
			if json.Unmarshal(raw, &typed) == nil && typed.Type != "" {
				if v := string(typed.Value); strings.HasPrefix(strings.TrimPrefix(typed.Type, "u"), "int") {
					if _, err := strconv.ParseInt(v, 10, 64); err == nil {
						add(v)
					}
				}
				continue
			}
			if depth == 0 {
				headerTableKeys(raw, failureType, failureMessage, add, depth+1)
			}
		}
	}
}

// failureKeys adds the variable values of a failure message: quoted
// values, and words holding a digit (ids, numbers, addresses), whole and
// split at = : / ,.
func failureKeys(msg string, add func(string)) {
	if len(msg) > maxPatternInput {
		msg = msg[:maxPatternInput]
	}
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if (c == '"' || c == '\'' || c == '`') && (i == 0 || !isWordByte(msg[i-1])) {
			if j := strings.IndexByte(msg[i+1:], c); j > 0 {
				add(msg[i+1 : i+1+j])
			}
		}
	}
	for w := range strings.FieldsSeq(msg) {
		w = strings.Trim(w, `.,;:!?()[]{}<>"'`+"`")
		if !strings.ContainsAny(w, "0123456789") {
			continue
		}
		add(w)
		if strings.ContainsAny(w, "=:/,") {
			for p := range strings.FieldsFuncSeq(w, func(r rune) bool { return r == '=' || r == ':' || r == '/' || r == ',' }) {
				if strings.ContainsAny(p, "0123456789") {
					add(p)
				}
			}
		}
	}
}

// searchQuery is q, checked and prepared.
type searchQuery struct {
	key     string   // exact key
	like    string   // ILIKE pattern on failure text
	pattern string   // ILIKE pattern on group patterns
	values  []string // q's own variable values, as keys
	body    []byte
	// text is q as a full-text query over the text index (textsearch.go);
	// hasText is false when q has no word in it.
	text    textQuery
	hasText bool
	// walk is how many of the newest documents a listing's text search
	// reads before it asks the GIN index (Config.TextWalk).
	walk int
	// index, when the store seals, keys the hashes; failure text and
	// bodies are sealed then, so q matches keys only.
	index *crypt.Index
}

func parseQuery(q string) (searchQuery, error) {
	if !utf8.ValidString(q) || strings.IndexByte(q, 0) >= 0 {
		return searchQuery{}, fmt.Errorf("%w: q must be valid UTF-8 text without NUL", ErrInvalidFilter)
	}
	t := strings.TrimSpace(q)
	if utf8.RuneCountInString(t) < MinQueryLen {
		return searchQuery{}, fmt.Errorf("%w: q must have at least %d characters", ErrInvalidFilter, MinQueryLen)
	}
	sq := searchQuery{
		key:     strings.ToLower(t),
		like:    "%" + escapeLike(t) + "%",
		pattern: "%" + escapeLike(NormalizeFailure(t)) + "%",
		body:    []byte(q),
	}
	sq.text, sq.hasText = parseTextQuery(t)
	failureKeys(t, func(v string) {
		v = strings.ToLower(strings.TrimSpace(v))
		if len(v) >= 2 && len(v) <= maxSearchKeyLen && len(sq.values) < maxSearchKeys {
			sq.values = append(sq.values, v)
		}
	})
	return sq, nil
}

// wholeGroups renders the condition on the failure group aliased g that
// every message of it matches q: q is in its type or its masked pattern
// as it is (not a masked part, "<n>"). "FALSE" when q holds '<'.
func (sq searchQuery) wholeGroups(args *sqlArgs) string {
	if strings.Contains(sq.key, "<") {
		return "FALSE"
	}
	lit := args.add(sq.like)
	return "(g.failure_type ILIKE " + lit + " OR g.pattern ILIKE " + lit + ")"
}

// partialGroups renders the condition on the failure group aliased g that
// q matches its pattern only once q's variable parts are masked ("took
// 1500ms" in "took <n>ms"): such a group's messages match when they have
// q's values as keys and q in their failure text (failureText). whole is
// wholeGroups, rendered.
func (sq searchQuery) partialGroups(args *sqlArgs, whole string) string {
	return "g.pattern ILIKE " + args.add(sq.pattern) + " AND NOT " + whole
}

// failureText renders "q is in the failure text of the row aliased
// alias": what a message of a partialGroups group must have besides q's
// variable values among its keys, whole (so a partial number, "took 150",
// does not match "took 1500ms").
func (sq searchQuery) failureText(args *sqlArgs, alias string) string {
	p := args.add(sq.like)
	return "(" + alias + ".failure_type ILIKE " + p + " OR " + alias + ".failure_message ILIKE " + p + ")"
}

// searchConds renders the text search (q) and failure group conditions as
// one condition on m (for bulk actions and replay selection; listings use
// ListMessages' faster plan with the same meaning).
func (f Filter) searchConds(args *sqlArgs, noBodySearch bool) ([]string, error) {
	var conds []string
	if f.Group != "" {
		id, err := ParseGroupID(f.Group)
		if err != nil {
			return nil, err
		}
		conds = append(conds, "m.group_id = "+args.add(id))
	}
	if f.Query != "" {
		sq, err := parseQuery(f.Query)
		if err != nil {
			return nil, err
		}
		sq.index = f.index
		conds = append(conds, sq.matches(args, f.SourceQueue != "" && !noBodySearch, !noBodySearch))
	}
	return conds, nil
}

// matches renders "the row aliased m matches q" as one condition: its
// keys, its failure text through the groups, its words (the text index's
// document, with the body's words when bodyText is true: the caller may
// see bodies), and its body's bytes when body is true (a source queue is
// named, and the caller may see bodies). It is the listing's search
// (searchIDs) as a condition on one row, built from the same parts, so
// that a bulk action, a replay, a count or a listing of replaying rows
// selects exactly what the listing shows.
func (sq searchQuery) matches(args *sqlArgs, body, bodyText bool) string {
	if sq.index != nil {
		return "(" + sq.hasKeys(args, "m", sq.key) + ")"
	}
	whole := sq.wholeGroups(args)
	arms := []string{
		"(" + sq.hasKeys(args, "m", sq.key) + ")",
		"m.group_id = ANY(ARRAY(SELECT g.id FROM failure_groups g WHERE " + whole + "))",
	}
	if len(sq.values) > 0 {
		arms = append(arms, "(m.group_id = ANY(ARRAY(SELECT g.id FROM failure_groups g WHERE "+sq.partialGroups(args, whole)+
			")) AND "+sq.hasKeys(args, "m", sq.values...)+" AND "+sq.failureText(args, "m")+")")
	}
	if sq.hasText {
		tsq := sq.text.sql(args)
		arms = append(arms, "(m.enc_key_id IS NULL AND (EXISTS (SELECT 1 FROM message_text t WHERE t.id = m.id AND "+textDocMatch("t", tsq, bodyText)+
			") OR (m.id = ANY("+textTailSQL()+") AND m.body_text_bytes IS NOT NULL AND "+bodyTextSQL("m")+" @@ "+tsq+
			sq.bodyless("m", tsq, bodyText)+")))")
	}
	if body {
		arms = append(arms, "position("+args.add(sq.body)+"::bytea IN m.body) > 0")
	}
	return "(" + strings.Join(arms, " OR ") + ")"
}

// textDocMatch renders "the document of message_text aliased alias has
// tsq's words" (tsq rendered), through its GIN index. Without bodyText a
// row found is checked again against the document's weight-A part (the
// failure text and header values: textindex.go), so that a caller who
// may not see bodies learns nothing about them.
func textDocMatch(alias, tsq string, bodyText bool) string {
	cond := alias + ".document @@ " + tsq
	if !bodyText {
		cond += " AND ts_filter(" + alias + ".document, '{a}') @@ " + tsq
	}
	return cond
}

// bodyless renders, when the caller may not see bodies (bodyText false),
// " AND" the row aliased alias (a row still waiting for its document)
// matching tsq (rendered) without its body, so that such a caller learns
// nothing about bodies. "" otherwise.
func (sq searchQuery) bodyless(alias, tsq string, bodyText bool) string {
	if bodyText {
		return ""
	}
	return " AND dlq_search_document(" + alias + ".failure_type, " + alias + ".failure_message, " + alias + ".failure, " +
		alias + ".search_text, " + alias + ".body, 0) @@ " + tsq
}

// escapeLike makes every character of s literal in a LIKE pattern whose
// escape character is the default backslash.
func escapeLike(s string) string {
	if !strings.ContainsAny(s, `%_\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == '%' || r == '_' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
