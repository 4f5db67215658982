package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlq/dlq/crypt"
)

// Failure groups gather dead messages that failed the same way: same source
// queue, same death reason, same failure type, and the same failure message
// once the parts that vary from message to message (numbers, hex ids,
// UUIDs, quoted values) are masked. The reason is part of the key so that
// stats by reason read from the groups table instead of scanning messages.

// maxPatternInput bounds how much of a failure message is normalised: the
// start of a message says what went wrong; the rest is usually detail.
const maxPatternInput = 512

// NormalizeFailure masks the variable parts of a failure message:
// UUIDs become <uuid>, hex ids <hex>, digit runs <n>, quoted values
// "<q>"; runs of white space become one space.
func NormalizeFailure(msg string) string {
	if len(msg) > maxPatternInput {
		msg = msg[:maxPatternInput]
	}
	// White space first, so masking sees the text it would see again.
	msg = strings.Join(strings.FieldsFunc(msg, isSpace), " ")
	var b strings.Builder
	b.Grow(len(msg))
	space := false
	for i := 0; i < len(msg); {
		c := msg[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			space = b.Len() > 0
			i++
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		wordStart := i == 0 || !isWordByte(msg[i-1])
		switch {
		case (c == '"' || c == '\'' || c == '`') && wordStart && (i == 0 || msg[i-1] != '>'):
			// Not after a mask either: "12`3`" must read the same once its
			// digits are masked.
			if j := strings.IndexByte(msg[i+1:], c); j >= 0 {
				b.WriteByte(c)
				b.WriteString("<q>")
				b.WriteByte(c)
				i += j + 2
				continue
			}
			b.WriteByte(c)
			i++
		case isWordByte(c) && wordStart:
			if isUUIDAt(msg[i:]) && (len(msg) == i+36 || !isWordByte(msg[i+36])) {
				b.WriteString("<uuid>")
				i += 36
				continue
			}
			j := i
			for j < len(msg) && isWordByte(msg[j]) {
				j++
			}
			writeWord(&b, msg[i:j])
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// writeWord writes one word with its variable parts masked.
func writeWord(b *strings.Builder, w string) {
	if len(w) > 2 && (w[:2] == "0x" || w[:2] == "0X") && allHex(w[2:]) {
		b.WriteString("<hex>")
		return
	}
	if len(w) >= 8 && allHex(w) && strings.ContainsAny(w, "0123456789") && !allDigits(w) {
		b.WriteString("<hex>")
		return
	}
	for i := 0; i < len(w); {
		if isDigit(w[i]) {
			for i < len(w) && isDigit(w[i]) {
				i++
			}
			b.WriteString("<n>")
			continue
		}
		b.WriteByte(w[i])
		i++
	}
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

func isWordByte(c byte) bool {
	return c == '_' || isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return s != ""
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

// isUUIDAt reports whether s starts with a UUID in its 8-4-4-4-12 form.
func isUUIDAt(s string) bool {
	if len(s) < 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}

// groupKey is what identifies a failure group. The category is part of
// it, so that a group has one category and counting by category is
// summing groups; "" and unknown are the same (unknown).
type groupKey struct {
	queue, reason, failureType, pattern, category string
}

// groupID hashes a group key. 0 is never returned: it means "no group".
// An unknown category adds nothing to the hash, so groups of messages
// stored before categories existed keep their ids.
func groupID(k groupKey) int64 {
	h := fnv.New64a()
	for _, s := range []string{k.queue, k.reason, k.failureType, k.pattern} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	if k.category != "" && k.category != CategoryUnknown {
		_, _ = h.Write([]byte(k.category))
		_, _ = h.Write([]byte{0})
	}
	id := int64(h.Sum64())
	if id == 0 {
		id = 1
	}
	return id
}

// GroupIDOf returns the failure group a message of unknown category with
// these fields belongs to, as FormatGroupID prints it. It is what ingest
// computes.
func GroupIDOf(queue, reason, failureType, failureMessage string) string {
	return GroupIDOfCategory(queue, reason, failureType, failureMessage, CategoryUnknown)
}

// GroupIDOfCategory is GroupIDOf for a message of category cat.
func GroupIDOfCategory(queue, reason, failureType, failureMessage, cat string) string {
	return FormatGroupID(groupID(newGroupKey(queue, reason, failureType, failureMessage, cat)))
}

func newGroupKey(queue, reason, failureType, failureMessage, cat string) groupKey {
	return groupKey{cleanText(queue), cleanText(reason), cleanText(failureType), NormalizeFailure(cleanText(failureMessage)), categoryOf(cat)}
}

// FormatGroupID renders a group id as its public form: 16 hex digits.
func FormatGroupID(id int64) string {
	s := strconv.FormatUint(uint64(id), 16)
	return strings.Repeat("0", 16-len(s)) + s
}

// ParseGroupID parses the public form of a group id.
func ParseGroupID(s string) (int64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("%w: group %q must be 16 hex digits", ErrInvalidFilter, s)
	}
	u, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: group %q must be 16 hex digits", ErrInvalidFilter, s)
	}
	if u == 0 {
		return 0, fmt.Errorf("%w: group %q is no group's id (none is zero; dlq groups lists them)", ErrInvalidFilter, s)
	}
	return int64(u), nil
}

// groupChange is what one transaction changes in one failure group: its
// counters (signed) and, for messages arriving, the key, a sample and the
// times seen. A change that only moves counters leaves the times zero.
type groupChange struct {
	key       groupKey
	sample    string
	counts    Counts
	firstSeen time.Time
	lastSeen  time.Time
}

// groupKeyOf is the failure group key of a message.
func groupKeyOf(m *NewMessage) groupKey {
	return newGroupKey(m.SourceQueue, m.Reason, m.FailureType, m.FailureMessage, m.Category)
}

// groupArrival computes the group of a message arriving as pending (new,
// or a replayed message dead again) and records it in changes. When the
// store seals (index set), the id is keyed: a plain hash of the pattern
// would let a database reader test guesses of failure messages.
func groupArrival(m *NewMessage, changes map[int64]*groupChange, index *crypt.Index) int64 {
	return groupEnter(changes, groupKeyOf(m), m.FailureMessage, StatusPending, m.FailedAt, index)
}

// groupEnter records a message of the given status and failure time
// entering the group of k, with failureMessage as the group's sample if
// the group is new; index keys the id as groupArrival says.
func groupEnter(changes map[int64]*groupChange, k groupKey, failureMessage, status string, failedAt time.Time, index *crypt.Index) int64 {
	id := groupID(k)
	if index != nil {
		id = index.Group(id)
	}
	c := changes[id]
	if c == nil {
		c = &groupChange{}
		changes[id] = c
	}
	if c.key == (groupKey{}) {
		msg := cleanText(failureMessage)
		if len(msg) > maxPatternInput {
			msg = strings.ToValidUTF8(msg[:maxPatternInput], "")
		}
		c.key, c.sample = k, msg
	}
	c.counts.add(status, 1)
	if c.firstSeen.IsZero() || failedAt.Before(c.firstSeen) {
		c.firstSeen = failedAt
	}
	if failedAt.After(c.lastSeen) {
		c.lastSeen = failedAt
	}
	return id
}

// groupMove records n messages of group id leaving status from (to "" when
// deleted) or entering status to (from "" when inserted).
func groupMove(changes map[int64]*groupChange, id int64, from, to string, n int64) {
	if id == 0 || from == to {
		return
	}
	c := changes[id]
	if c == nil {
		c = &groupChange{}
		changes[id] = c
	}
	c.counts.add(from, -n)
	c.counts.add(to, n)
}

// queueGroupChanges adds one upsert applying changes to failure_groups to
// b. Rows go in id order, the lock order every writer of failure_groups
// follows. A change without a key targets a group that exists (its
// messages reference it); the placeholder values of its insert part are
// never used, and its infinite times leave first and last seen alone.
// When the store seals (enc set), a new group's pattern and sample go in

// moveGroups applies the group changes of messages that a background job
// moved from one failure group to another (categories, backfill
// older_rows), in tx; neither needs the encryption state ingest passes.
func moveGroups(ctx context.Context, tx pgx.Tx, moves map[int64]*groupChange) error {
	var b pgx.Batch
	if err := queueGroupChanges(&b, moves, nil); err != nil {
		return err
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("move groups: %w", err)
	}
	return nil
}

// enc_text, sealed.
func queueGroupChanges(b *pgx.Batch, changes map[int64]*groupChange, enc *encState) error {
	ids := make([]int64, 0, len(changes))
	for id, c := range changes {
		if c.counts != (Counts{}) || !c.lastSeen.IsZero() {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	n := len(ids)
	queues, reasons, types, patterns, samples := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	cats := make([]string, n)
	p, rg, rd, a := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	first, last := make([]*time.Time, n), make([]*time.Time, n)
	keyIDs, texts := make([]*string, n), make([][]byte, n)
	for i, id := range ids {
		c := changes[id]
		queues[i], reasons[i], types[i], patterns[i], samples[i] = c.key.queue, c.key.reason, c.key.failureType, c.key.pattern, c.sample
		cats[i] = categoryOf(c.key.category)
		if enc != nil && c.key != (groupKey{}) {
			t, err := enc.sealGroupText(id, c.key.pattern, c.sample)
			if err != nil {
				return fmt.Errorf("seal failure group %d: %w", id, err)
			}
			active := enc.ring.Active()
			keyIDs[i], texts[i] = &active, t
			patterns[i], samples[i] = "", ""
		}
		p[i], rg[i], rd[i], a[i] = c.counts.Pending, c.counts.Replaying, c.counts.Replayed, c.counts.Acknowledged
		if !c.lastSeen.IsZero() {
			first[i], last[i] = &c.firstSeen, &c.lastSeen
		}
	}
	b.Queue(`
INSERT INTO failure_groups AS g (id, source_queue, reason, failure_type, pattern, sample_message,
    pending, replaying, replayed, acknowledged, first_seen, last_seen, category, enc_key_id, enc_text)
SELECT id, q, r, t, pt, s, p, rg, rd, a, coalesce(f, 'infinity'), coalesce(l, '-infinity'), c, k, x
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
    $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::timestamptz[], $12::timestamptz[],
    $13::text[], $14::text[], $15::bytea[])
    AS u(id, q, r, t, pt, s, p, rg, rd, a, f, l, c, k, x)
ON CONFLICT (id) DO UPDATE SET
    pending = g.pending + EXCLUDED.pending,
    replaying = g.replaying + EXCLUDED.replaying,
    replayed = g.replayed + EXCLUDED.replayed,
    acknowledged = g.acknowledged + EXCLUDED.acknowledged,
    first_seen = LEAST(g.first_seen, EXCLUDED.first_seen),
    last_seen = GREATEST(g.last_seen, EXCLUDED.last_seen)`,
		ids, queues, reasons, types, patterns, samples, p, rg, rd, a, first, last, cats, keyIDs, texts)
	return nil
}
