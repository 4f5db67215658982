package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is one stored dead message as the API shows it. The JSON names
// are the public contract (PRODUCT.md, "Message JSON fields").
type Message struct {
	ID               int64           `json:"id"`
	MessageID        *string         `json:"message_id"`
	SourceQueue      string          `json:"source_queue"`
	SourceExchange   string          `json:"source_exchange"`
	SourceRoutingKey string          `json:"source_routing_key"`
	DeadLetterQueue  string          `json:"dead_letter_queue"`
	Reason           string          `json:"reason"`
	DeathCount       int64           `json:"death_count"`
	Failure          json.RawMessage `json:"failure"`
	// Properties and Headers are the typed JSON stored at ingest, passed
	// through as they are.
	Properties json.RawMessage `json:"properties"`
	Headers    json.RawMessage `json:"headers"`
	// XDeath is the parsed x-death header, most recent entry first, []
	// when none: stored at ingest (NewMessage.XDeath), derived from the
	// headers in SQL for rows stored otherwise (migration 00070).
	XDeath json.RawMessage `json:"x_death"`
	// Body is nil unless asked for.
	Body        *[]byte `json:"body,omitempty"`
	BodySize    int64   `json:"body_size"`
	Status      string  `json:"status"`
	ReplayCount int64   `json:"replay_count"`
	// Category is the failure category: transient, permanent or unknown.
	Category string `json:"category"`
	// AutoExhausted says the automatic replay policies tried the message
	// as often as they may and it died again: it is parked for a human.
	AutoExhausted  bool       `json:"auto_exhausted"`
	FirstFailedAt  time.Time  `json:"first_failed_at"`
	FailedAt       time.Time  `json:"failed_at"`
	ReplayedAt     *time.Time `json:"replayed_at"`
	AcknowledgedAt *time.Time `json:"acknowledged_at"`
	Group          *string    `json:"group"`
	// DeathHistory lists the earlier deaths of a message that was replayed
	// and died again, oldest first (at most DeathHistoryMax); [] when none.
	// The latest death is the message's own reason, failed_at and failure.
	DeathHistory    json.RawMessage `json:"death_history"`
	LastReplayError *string         `json:"last_replay_error,omitempty"`
	ConversionError *string         `json:"conversion_error,omitempty"`
	// ImportedFrom is where an imported message was first stored; absent
	// for a message this dlq received itself.
	ImportedFrom *ImportOrigin `json:"imported_from,omitempty"`
	// Edited is the message's latest edit-then-replay, when it has one
	// (single-message reads only).
	Edited *MessageEdit `json:"edited,omitempty"`
	// Encryption is set for a sealed message (seal.go) once ops opened
	// it: the key, and why it could not be read if it could not.
	Encryption *EncryptionInfo `json:"encryption,omitempty"`
	// Sealed holds a sealed row's encrypted part as read: properties,
	// headers, failure, message id and body are not filled until ops
	// opens it. Nil for a plain row.
	Sealed *Sealed `json:"-"`
}

// messageColumns are read in the order scanMessage expects; the body is
// appended only when asked for, so lists never read TOASTed bodies.
const messageColumns = `m.id, m.message_id, m.source_queue, m.source_exchange, m.source_routing_key,
    m.dead_letter_queue, m.reason, m.death_count, m.failure, m.properties, m.headers, coalesce(m.x_death, dlq_x_death(m.headers)),
    m.body_size, m.status, m.replay_count, m.first_failed_at, m.failed_at, m.replayed_at, m.acknowledged_at,
    m.group_id, m.last_replay_error, m.conversion_error, m.death_history, m.imported_origin::text, m.imported_id,
    m.category, m.auto_exhausted, m.enc_key_id, m.enc_dek, m.enc_nonce, m.enc_meta`

func scanMessage(rows pgx.Rows, withBody bool) (Message, error) {
	var (
		m              Message
		group          *int64
		body           []byte
		origin         *string
		importedFromID *int64
		keyID          *string
		sl             Sealed
	)
	// The JSON columns are scanned as bytes: into a json.RawMessage pgx
	// would run encoding/json over text PostgreSQL already validated (a
	// sixth of a 500-row console page's CPU); NULL is nil either way.
	dest := []any{&m.ID, &m.MessageID, &m.SourceQueue, &m.SourceExchange, &m.SourceRoutingKey,
		&m.DeadLetterQueue, &m.Reason, &m.DeathCount, (*[]byte)(&m.Failure), (*[]byte)(&m.Properties), (*[]byte)(&m.Headers), (*[]byte)(&m.XDeath),
		&m.BodySize, &m.Status, &m.ReplayCount, &m.FirstFailedAt, &m.FailedAt, &m.ReplayedAt, &m.AcknowledgedAt,
		&group, &m.LastReplayError, &m.ConversionError, (*[]byte)(&m.DeathHistory), &origin, &importedFromID, &m.Category, &m.AutoExhausted,
		&keyID, &sl.Envelope.DEK, &sl.Envelope.Nonce, &sl.Meta}
	if withBody {
		dest = append(dest, &body)
	}
	if err := rows.Scan(dest...); err != nil {
		return Message{}, err
	}
	if keyID != nil {
		sl.Envelope.KeyID = *keyID
		if withBody {
			sl.Body, body = nonNilBytes(body), nil
			withBody = false
		}
		m.Sealed = &sl
	}
	if withBody {
		if body == nil {
			body = []byte{}
		}
		m.Body = &body
	}
	if group != nil {
		g := FormatGroupID(*group)
		m.Group = &g
	}
	if origin != nil && importedFromID != nil {
		m.ImportedFrom = &ImportOrigin{Origin: *origin, ID: *importedFromID}
	}
	m.FirstFailedAt, m.FailedAt = m.FirstFailedAt.UTC(), m.FailedAt.UTC()
	if m.ReplayedAt != nil {
		t := m.ReplayedAt.UTC()
		m.ReplayedAt = &t
	}
	if m.AcknowledgedAt != nil {
		t := m.AcknowledgedAt.UTC()
		m.AcknowledgedAt = &t
	}
	if len(m.Failure) == 0 {
		m.Failure = nil
	}
	if len(m.DeathHistory) == 0 {
		m.DeathHistory = json.RawMessage("[]")
	}
	if len(m.XDeath) == 0 {
		m.XDeath = json.RawMessage("[]")
	}
	return m, nil
}

// ListOptions pages a listing.
type ListOptions struct {
	// Limit is the page size. Optional; default 50, at most 1000.
	Limit int
	// Before continues a listing: only messages with a smaller id. 0
	// starts at the newest.
	Before int64
	// IncludeBody reads bodies too.
	IncludeBody bool
	// BodyPrefix, with IncludeBody, reads only the first BodyPrefix bytes
	// of each body (a sealed body is read whole: it opens only whole, and
	// the caller cuts it): enough to show where a search matched.
	BodyPrefix int
	// NoBodySearch keeps q away from bodies, for callers not allowed to see
	// them (a search would otherwise reveal what a body contains).
	NoBodySearch bool
	// Sort is the order: SortNewest (by id, the default), SortFailed or
	// SortQueue (list_sort.go). After continues a sorted listing (Before
	// is for the default order).
	Sort  string
	After SortKey
}

// List limits.
const (
	ListLimitDefault = 50
	ListLimitMax     = 1000
)

// MessagePage is one page of a listing, newest first.
type MessagePage struct {
	Messages []Message
	// HasMore says whether older messages match; LastID is then where the
	// next page starts (ListOptions.Before).
	HasMore bool
	LastID  int64
	// Last is where the next page of a sorted listing starts
	// (ListOptions.After).
	Last SortKey
	// TextIncomplete says q's words were looked for in the text index and
	// the newest TextTailMax rows waiting for it, and more rows than that
	// were waiting (textindex.go): an older match may be missing until
	// the indexer has caught up.
	TextIncomplete bool
}

// ListMessages returns messages matching f, newest first (by id), one page
// at a time. Pages are a keyset on id: a page starts strictly below the
// previous page's last id, so rows inserted meanwhile (always with larger
// ids) never shift a page, and no message is skipped or repeated. Each page
// is an index range scan on (status, id), (source_queue, status, id) or
// (group_id, status, id), whatever its depth.
func (s *Store) ListMessages(ctx context.Context, f Filter, opt ListOptions) (MessagePage, error) {
	page := MessagePage{Messages: make([]Message, 0, min(cmp.Or(opt.Limit, ListLimitDefault), 64))}
	collect := func(m Message) error {
		page.Messages = append(page.Messages, m)
		return nil
	}
	if opt.Sort != SortNewest {
		more, last, err := s.eachSortedPage(ctx, f, opt, collect)
		if err != nil {
			return MessagePage{}, err
		}
		page.HasMore, page.LastID, page.Last = more, last.ID, last
		return page, nil
	}
	more, last, err := s.EachMessage(ctx, f, opt, collect)
	if err != nil {
		return MessagePage{}, err
	}
	page.HasMore, page.LastID = more, last
	if page.TextIncomplete, err = s.textIncomplete(ctx, f.Query); err != nil {
		return MessagePage{}, err
	}
	return page, nil
}

// TextSearchIncomplete reports whether a search for q would miss
// messages now: q has words to look for, and more messages wait for the
// text index than a search reads one by one. q must be valid.
func (s *Store) TextSearchIncomplete(ctx context.Context, q string) (bool, error) {
	incomplete, err := s.textIncomplete(ctx, q)
	if err != nil {
		return false, fmt.Errorf("store: how far the text index is behind: %w", err)
	}
	return incomplete, nil
}

// textIncomplete reports whether q (valid: the listing ran) has words to
// look for and more rows wait for the text index than a search reads.
// Where the store seals, q matches search keys only, which are written
// with each row: nothing waits for the text index then.
func (s *Store) textIncomplete(ctx context.Context, q string) (bool, error) {
	if q == "" || !s.text {
		return false, nil
	}
	if _, index, err := s.sealing(ctx); err != nil || index != nil {
		return false, err
	}
	if sq, err := parseQuery(q); err != nil || !sq.hasText {
		return false, nil
	}
	return textBehind(ctx, s.pool)
}

// EachMessage is ListMessages for one page whose messages are handed to fn
// one at a time, as they are read, instead of being collected: a page of
// messages with large bodies never sits in memory at once. more says
// whether older messages match, and last is then where the next page
// starts (ListOptions.Before). An error from fn ends the page with it.
func (s *Store) EachMessage(ctx context.Context, f Filter, opt ListOptions, fn func(Message) error) (more bool, last int64, err error) {
	limit := opt.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	if limit > ListLimitMax {
		return false, 0, fmt.Errorf("%w: limit %d is above the maximum %d", ErrInvalidFilter, limit, ListLimitMax)
	}
	if err := f.Validate(); err != nil {
		return false, 0, err
	}
	if f, err = s.withIndex(ctx, f); err != nil {
		return false, 0, err
	}
	cols := listColumns(opt)
	var (
		args  sqlArgs
		query string
		db    pageQueryer = s.pool
	)
	if f.Query != "" {
		sq, err := parseQuery(f.Query)
		if err != nil {
			return false, 0, err
		}
		sq.index = f.index
		sq.walk = s.textWalk
		tx, err := s.beginSearch(ctx)
		if err != nil {
			return false, 0, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
		db = tx
		if query, err = searchPageSQL(ctx, tx, f, sq, opt, limit, cols, &args); err != nil {
			return false, 0, err
		}
	} else if query, err = listPageSQL(f, opt, limit, cols, &args); err != nil {
		return false, 0, err
	}
	return eachPageRow(ctx, db, query, args, limit, opt.IncludeBody, fn)
}

// pageQueryer is what EachMessage reads a page through: the pool, or a
// search's transaction (beginSearch).
type pageQueryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// beginSearch begins the read-only transaction a search reads in. A
// search's estimated cost can pass PostgreSQL's JIT threshold, and
// compiling takes longer (hundreds of ms) than running these short
// queries; the transaction switches JIT off for itself.
func (s *Store) beginSearch(ctx context.Context) (pgx.Tx, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("store: list messages: %w", err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
		return nil, fmt.Errorf("store: list messages: %w", err)
	}
	return tx, nil
}

// searchPageSQL renders the query of one page of the search sq (f's q)
// with the columns cols, reading in tx: when q is a key thousands of
// messages share, it walks to the page's ids first (walkKey).
func searchPageSQL(ctx context.Context, tx pgx.Tx, f Filter, sq searchQuery, opt ListOptions, limit int, cols string, args *sqlArgs) (string, error) {
	// Is q a key thousands of messages share? Counting up to the
	// threshold reads the GIN index and the visibility map, not rows.
	var shared int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM dead_messages k
WHERE k.status <> 'replaying' AND k.search_hashes && $1::bigint[] LIMIT `+strconv.Itoa(sharedKeyThreshold)+`) c`, sq.keyHashes(sq.key)).Scan(&shared)
	if err != nil {
		return "", fmt.Errorf("store: list messages: %w", err)
	}
	var keyIDs []int64
	if shared >= sharedKeyThreshold {
		if keyIDs, err = walkKey(ctx, tx, f, sq, opt, limit); err != nil {
			return "", err
		}
	}
	ids, err := searchIDs(f, sq, opt, limit, keyIDs, args)
	if err != nil {
		return "", err
	}
	return `SELECT ` + cols + ` FROM dead_messages m WHERE m.id IN (` + ids + `) ORDER BY m.id DESC`, nil
}

// listPageSQL renders the query of one page of a listing without q, with
// the columns cols.
func listPageSQL(f Filter, opt ListOptions, limit int, cols string, args *sqlArgs) (string, error) {
	statuses, _ := f.Statuses()
	resting, replaying := restingStatuses(statuses)
	if replaying && len(resting) > 0 {
		// The listing indexes leave replaying rows out (migration 00061):
		// the other statuses and the replaying rows are read apart, each
		// newest first, and merged.
		ids, err := splitListIDs(f, resting, opt, limit, args)
		if err != nil {
			return "", err
		}
		return `SELECT ` + cols + ` FROM dead_messages m WHERE m.id IN (` + ids + `) ORDER BY m.id DESC`, nil
	}
	where, err := f.where(args)
	if err != nil {
		return "", err
	}
	if opt.Before > 0 {
		where += " AND m.id < " + args.add(opt.Before)
	}
	return `SELECT ` + cols + ` FROM dead_messages m WHERE ` + where + ` ORDER BY m.id DESC LIMIT ` + args.add(limit+1), nil
}

// eachPageRow runs query, a page of at most limit messages and one more
// (which only says that there are more), and hands each message to fn.
func eachPageRow(ctx context.Context, db pageQueryer, query string, args sqlArgs, limit int, includeBody bool, fn func(Message) error) (more bool, last int64, err error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return false, 0, fmt.Errorf("store: list messages: %w", err)
	}
	defer rows.Close()
	var n int
	for rows.Next() {
		if n == limit {
			more = true
			break
		}
		m, err := scanMessage(rows, includeBody)
		if err != nil {
			return false, 0, fmt.Errorf("store: list messages: read row: %w", err)
		}
		n++
		last = m.ID
		if err := fn(m); err != nil {
			return false, 0, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, 0, fmt.Errorf("store: list messages: %w", err)
	}
	if !more {
		last = 0
	}
	return more, last, nil
}

// listColumns are the columns a listing reads: the body, or its
// beginning, when asked for.
func listColumns(opt ListOptions) string {
	switch {
	case !opt.IncludeBody:
		return messageColumns
	case opt.BodyPrefix > 0:
		return messageColumns + ", CASE WHEN m.enc_key_id IS NULL THEN substring(m.body FROM 1 FOR " + strconv.Itoa(opt.BodyPrefix) + ") ELSE m.body END"
	}
	return messageColumns + ", m.body"
}

// splitListIDs renders the ids of one page of a listing (no q) that wants
// replaying rows and others: the newest limit+1 of the resting statuses
// (through the listing indexes) and of the replaying rows (through the
// claim index).
func splitListIDs(f Filter, resting []string, opt ListOptions, limit int, args *sqlArgs) (string, error) {
	rest, rep := f, f
	rest.Status = strings.Join(resting, ",")
	rep.Status = StatusReplaying
	n := args.add(limit + 1)
	var before string
	if opt.Before > 0 {
		before = " AND m.id < " + args.add(opt.Before)
	}
	var arms []string
	for _, part := range []Filter{rest, rep} {
		w, err := part.where(args)
		if err != nil {
			return "", err
		}
		arms = append(arms, `(SELECT m.id FROM dead_messages m WHERE `+w+before+` ORDER BY m.id DESC LIMIT `+n+`)`)
	}
	return `SELECT u.id FROM (` + strings.Join(arms, " UNION ALL ") + `) u ORDER BY u.id DESC LIMIT ` + n, nil
}

// GetMessage returns one message with its body. A message outside scope
// (nil: every queue) is ErrNotFound, exactly like a missing one, so a
// scoped caller cannot learn that it exists.
func (s *Store) GetMessage(ctx context.Context, id int64, scope []string) (Message, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+messageColumns+`, m.body FROM dead_messages m
WHERE m.id = $1 AND ($2::text[] IS NULL OR m.source_queue = ANY($2))`, id, scope)
	if err != nil {
		return Message{}, fmt.Errorf("store: get message %d: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Message{}, fmt.Errorf("store: get message %d: %w", id, err)
		}
		return Message{}, fmt.Errorf("store: message %d: %w", id, ErrNotFound)
	}
	m, err := scanMessage(rows, true)
	if err != nil {
		return Message{}, fmt.Errorf("store: get message %d: %w", id, err)
	}
	return m, nil
}

// MessagesExist reports which of ids exist within scope (nil: every
// queue).
func (s *Store) MessagesExist(ctx context.Context, ids []int64, scope []string) (map[int64]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT m.id FROM dead_messages m
WHERE m.id = ANY($1) AND ($2::text[] IS NULL OR m.source_queue = ANY($2))`, ids, scope)
	if err != nil {
		return nil, fmt.Errorf("store: look up %d messages: %w", len(ids), err)
	}
	out := make(map[int64]bool, len(ids))
	ids2, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: look up %d messages: %w", len(ids), err)
	}
	for _, id := range ids2 {
		out[id] = true
	}
	return out, nil
}
