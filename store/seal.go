package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/dlq/dlq/crypt"
)

// Encryption at rest (docs/SECURITY.md). With Config.Encryption set, the
// store seals what it writes: a dead message's body, its properties, its
// sealed headers (all of them, or Encryption.SealHeader's) and its
// failure details, each row under a data key of its own (package crypt),
// bound to the row's id. The plain columns keep what filters, counters
// and the death record need: queues, reason, failure type, sizes, times,
// x_death. Search keys, the content fingerprint and the failure group id
// become keyed hashes under the index key, so exact search and
// redelivery matching work as before without plain values.
//
// The store never opens what it sealed: ops opens a message for a
// principal allowed to see it, replay opens it to publish it. The one
// comparison ingest needs (is a replayed message that died again the
// same body as its record's?) is crypt's RowKey.Matches, which answers
// yes or no.

// Encryption configures sealing.
type Encryption struct {
	// Ring holds the key-encryption keys. Required.
	Ring *crypt.Ring
	// SealHeader says which headers are sealed. Optional; nil seals every
	// header. Headers it leaves out stay readable in the headers column.
	SealHeader func(name string) bool
}

// Sealed references: the table and row a sealed value is bound to.
const (
	tableMessages = "dead_messages"
	tableGroups   = "failure_groups"
	tableTasks    = "replay_tasks"
)

// MessageRef is the reference message id's sealed values are bound to.
func MessageRef(id int64) crypt.Ref { return crypt.Ref{Table: tableMessages, Row: id} }

// GroupRef is the reference a failure group's sealed text is bound to.
func GroupRef(id int64) crypt.Ref { return crypt.Ref{Table: tableGroups, Row: id} }

// TaskRef is the reference a replay task's sealed edit is bound to.
func TaskRef(id int64) crypt.Ref { return crypt.Ref{Table: tableTasks, Row: id} }

// Sealed is the encrypted part of a stored message as read: opened by ops
// for a principal allowed to see it, or by replay to publish it.
type Sealed struct {
	Envelope crypt.Envelope
	// Meta seals the SealedMeta.
	Meta []byte
	// Body seals the body; nil when the body was not read.
	Body []byte
}

// EncryptionInfo is the "encryption" field of a sealed message or group:
// the key it is sealed under, and why it cannot be read, if it cannot.
type EncryptionInfo struct {
	KeyID string `json:"key_id"`
	Error string `json:"error,omitempty"`
}

// SealedMeta is the plain text of a message's Sealed.Meta.
type SealedMeta struct {
	Properties json.RawMessage
	// Headers are the sealed headers; the others are in the headers
	// column (MergeHeaders joins them).
	Headers json.RawMessage
	// Failure is the failure detail JSON, nil when none.
	Failure json.RawMessage
}

const sealedMetaVersion = 1

// Append encodes m: a version byte, then each part with its length.
func (m SealedMeta) Append(dst []byte) []byte {
	dst = append(dst, sealedMetaVersion)
	for _, p := range [][]byte{m.Properties, m.Headers, m.Failure} {
		dst = binary.AppendUvarint(dst, uint64(len(p)))
		dst = append(dst, p...)
	}
	return dst
}

// ParseSealedMeta decodes what SealedMeta.Append wrote.
func ParseSealedMeta(b []byte) (SealedMeta, error) {
	if len(b) == 0 || b[0] != sealedMetaVersion {
		return SealedMeta{}, errors.New("store: sealed meta: unknown version")
	}
	b = b[1:]
	var parts [3][]byte
	for i := range parts {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return SealedMeta{}, fmt.Errorf("store: sealed meta: part %d is cut short", i)
		}
		parts[i] = b[w : w+int(n)]
		b = b[w+int(n):]
	}
	if len(b) != 0 {
		return SealedMeta{}, errors.New("store: sealed meta: trailing bytes")
	}
	m := SealedMeta{Properties: parts[0], Headers: parts[1], Failure: parts[2]}
	if len(m.Failure) == 0 {
		m.Failure = nil
	}
	return m, nil
}

// emptyObject is the headers and properties columns of a row whose values
// are all sealed.
var emptyObject = json.RawMessage(`{}`)

// splitHeaders parts a header table's JSON (broker.AppendHeadersJSON)
// into the headers left plain and those sealed. A table the codec wrapped
// (keys in base64, or a lookalike of a typed value) is sealed whole.
func splitHeaders(hj json.RawMessage, seal func(string) bool) (plain, sealed json.RawMessage, err error) {
	if seal == nil || len(hj) == 0 || bytes.Equal(hj, emptyObject) {
		return emptyObject, hj, nil
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(hj, &h); err != nil {
		return nil, nil, fmt.Errorf("store: split headers: %w", err)
	}
	if wrappedTable(h) {
		return emptyObject, hj, nil
	}
	var p, s map[string]json.RawMessage
	for k, v := range h {
		if seal(k) {
			if s == nil {
				s = map[string]json.RawMessage{}
			}
			s[k] = v
		} else {
			if p == nil {
				p = map[string]json.RawMessage{}
			}
			p[k] = v
		}
	}
	return appendObject(nil, p), appendObject(nil, s), nil
}

// wrappedTable reports whether a decoded top-level header object is one
// of the codec's wrappers rather than a table of headers.
func wrappedTable(h map[string]json.RawMessage) bool {
	t, ok := h["type"]
	if !ok || string(t) != `"table"` {
		return false
	}
	for k := range h {
		if k != "type" && k != "value" && k != "encoding" {
			return false
		}
	}
	return true
}

// appendObject writes members with their keys in byte order, as the
// header codec does; json.Marshal escapes a key exactly as it does.
func appendObject(dst []byte, members map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		kb, _ := json.Marshal(k)
		dst = append(dst, kb...)
		dst = append(dst, ':')
		dst = append(dst, members[k]...)
	}
	return append(dst, '}')
}

// MergeHeaders joins a sealed message's plain and sealed headers into the
// header JSON it arrived with.
func MergeHeaders(plain, sealed json.RawMessage) (json.RawMessage, error) {
	if len(plain) == 0 || bytes.Equal(plain, emptyObject) {
		if len(sealed) == 0 {
			return emptyObject, nil
		}
		return sealed, nil
	}
	if len(sealed) == 0 || bytes.Equal(sealed, emptyObject) {
		return plain, nil
	}
	var p, s map[string]json.RawMessage
	if err := json.Unmarshal(plain, &p); err != nil {
		return nil, fmt.Errorf("store: stored headers: %w", err)
	}
	if err := json.Unmarshal(sealed, &s); err != nil {
		return nil, fmt.Errorf("store: sealed headers: %w", err)
	}
	for k, v := range s {
		p[k] = v
	}
	return appendObject(nil, p), nil
}

// encState is a Store's sealing state: the ring, and the index key once
// read from the database.
type encState struct {
	ring       *crypt.Ring
	sealHeader func(string) bool

	mu    sync.Mutex
	index *crypt.Index
}

// sealing returns the state to seal with and its index key, reading or
// making the index key on first use; nil when encryption is off.
func (s *Store) sealing(ctx context.Context) (*encState, *crypt.Index, error) {
	if s.enc == nil {
		return nil, nil, nil
	}
	e := s.enc
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.index != nil {
		return e, e.index, nil
	}
	x, err := s.loadIndex(ctx, e.ring)
	if err != nil {
		return nil, nil, err
	}
	e.index = x
	return e, x, nil
}

// PrepareSealing reads (or makes) the index key now, so that a key
// configured with the wrong secret is found at start rather than at the
// first write: the index key then does not authenticate (crypt.ErrTampered).
func (s *Store) PrepareSealing(ctx context.Context) error {
	_, _, err := s.sealing(ctx)
	return err
}

// Encrypted reports whether the store seals what it writes.
func (s *Store) Encrypted() bool { return s.enc != nil }

// loadIndex reads the index key, or makes it if there is none yet, and
// registers the active key in encryption_keys_used (once per process:
// every seal uses the active key, and the ring never changes).
func (s *Store) loadIndex(ctx context.Context, ring *crypt.Ring) (*crypt.Index, error) {
	if _, err := s.pool.Exec(ctx, `INSERT INTO encryption_keys_used (key_id) VALUES ($1) ON CONFLICT DO NOTHING`, ring.Active()); err != nil {
		return nil, fmt.Errorf("store: register encryption key %s: %w", ring.Active(), err)
	}
	var keyID string
	var wrapped []byte
	err := s.pool.QueryRow(ctx, `SELECT key_id, wrapped FROM encryption_index`).Scan(&keyID, &wrapped)
	if errors.Is(err, pgx.ErrNoRows) {
		_, id, w, err := ring.NewIndex()
		if err != nil {
			return nil, err
		}
		// Another instance may make it at the same moment: the first
		// insert wins and both read it back.
		if _, err := s.pool.Exec(ctx, `INSERT INTO encryption_index (key_id, wrapped) VALUES ($1, $2) ON CONFLICT DO NOTHING`, id, w); err != nil {
			return nil, fmt.Errorf("store: store the index key: %w", err)
		}
		err = s.pool.QueryRow(ctx, `SELECT key_id, wrapped FROM encryption_index`).Scan(&keyID, &wrapped)
		if err != nil {
			return nil, fmt.Errorf("store: read the index key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("store: read the index key: %w", err)
	}
	x, err := ring.OpenIndex(keyID, wrapped)
	if err != nil {
		return nil, fmt.Errorf("store: open the index key: %w", err)
	}
	return x, nil
}

// sealedRow is a message's columns as a sealed row stores them.
type sealedRow struct {
	env     crypt.Envelope
	body    []byte
	meta    []byte
	headers json.RawMessage
	hashes  []int64
}

// sealMessage seals m as row id.
func (e *encState) sealMessage(x *crypt.Index, id int64, m *NewMessage) (sealedRow, error) {
	plain, sealed, err := splitHeaders(m.storedHeaders(), e.sealHeader)
	if err != nil {
		return sealedRow{}, err
	}
	sl, err := e.ring.NewSealer()
	if err != nil {
		return sealedRow{}, err
	}
	ref := MessageRef(id)
	meta := SealedMeta{Properties: m.Properties, Headers: sealed, Failure: m.Failure}
	// Room for the encoding's lengths and the tag: sealed in place.
	buf := meta.Append(make([]byte, 0, 64+len(m.Properties)+len(sealed)+len(m.Failure)))
	return sealedRow{
		env:     sl.Envelope(),
		body:    sl.Seal(make([]byte, 0, len(m.Body)+32), ref, crypt.FieldBody, m.Body),
		meta:    sl.Seal(buf[:0], ref, crypt.FieldMeta, buf),
		headers: plain,
		hashes:  x.Keys(SearchKeys(m)),
	}, nil
}

// nextMessageIDs reserves n ids of dead_messages, so that sealed values
// can be bound to their rows before the rows are written. The sequence is
// named as a regclass constant, which PostgreSQL resolves once per
// statement: pg_get_serial_sequence in its place was looked up for every
// id, about 3 µs of the database's CPU per sealed message.
func nextMessageIDs(ctx context.Context, tx pgx.Tx, n int) ([]int64, error) {
	rows, err := tx.Query(ctx, `SELECT nextval('dead_messages_id_seq'::regclass) FROM generate_series(1, $1)`, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// groupText is a failure group's sealed pattern and sample.
type groupText struct {
	Pattern string `json:"pattern"`
	Sample  string `json:"sample"`
}

// OpenGroupText parses the plain text of a failure group's sealed text.
func OpenGroupText(b []byte) (pattern, sample string, err error) {
	var t groupText
	if err := json.Unmarshal(b, &t); err != nil {
		return "", "", fmt.Errorf("store: sealed group text: %w", err)
	}
	return t.Pattern, t.Sample, nil
}

// sealedEdit is how replay_tasks.edit holds a sealed edit.
type sealedEdit struct {
	KeyID  string `json:"key_id"`
	Sealed []byte `json:"sealed"`
}

func (e *encState) sealEdit(taskID int64, edit []byte) ([]byte, error) {
	blob, err := e.ring.SealBlob(TaskRef(taskID), crypt.FieldEdit, edit)
	if err != nil {
		return nil, fmt.Errorf("store: seal the edit of replay task %d: %w", taskID, err)
	}
	return json.Marshal(sealedEdit{KeyID: e.ring.Active(), Sealed: blob})
}

// SealedEdit returns the sealed blob of a replay task's edit (crypt
// blob, crypt.FieldEdit, TaskRef), ok false when the edit is plain JSON.
func SealedEdit(edit json.RawMessage) (blob []byte, ok bool) {
	if !bytes.Contains(edit, []byte(`"sealed"`)) {
		return nil, false
	}
	var se sealedEdit
	if json.Unmarshal(edit, &se) != nil || len(se.Sealed) == 0 {
		return nil, false
	}
	return se.Sealed, true
}

func (e *encState) sealGroupText(id int64, pattern, sample string) ([]byte, error) {
	b, err := json.Marshal(groupText{Pattern: pattern, Sample: sample})
	if err != nil {
		return nil, err
	}
	return e.ring.SealBlob(GroupRef(id), crypt.FieldText, b)
}
