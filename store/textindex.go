package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlq/dlq/internal/proccpu"
)

// The text index off the ingest path (migrations 00079, 00090). New rows
// wait above the indexer's mark (text_index_mark): every plain row with
// an id up to the mark has its document, so ingest writes nothing for
// text search. Rows that change after they are stored (returned to
// record, imported, backfilled) are named in text_index_queue by the
// path that changes them, in its own transaction. IndexText (run by
// package textindex) writes the documents into message_text, whose GIN
// index searches read. Rows still waiting are searched through the
// newest TextTailMax of each kind (textTailSQL), so a message that died a
// second ago is found before its document is written.

// TextTailMax is how many of the newest rows waiting for a document a
// search reads one by one (through the primary key). When more are
// waiting, the answer says the words of the older ones were not searched
// (MessagePage.TextIncomplete).
const TextTailMax = 10000

// TextIndexBatchDefault is how many rows IndexText takes at most when
// asked for none.
const TextIndexBatchDefault = 1000

// textQueueClaim bounds the entries one IndexText locks: an ingest entry
// holds one batch's rows.
const textQueueClaim = 32

// TextIndexResult is what one IndexText did.
type TextIndexResult struct {
	// Rows is how many waiting rows it took off the queue (sealed and
	// deleted rows among them get no document).
	Rows int
	// Documents is how many documents it wrote.
	Documents int
	// Newest is the newest message id it saw (0: none stored). An
	// indexer that sees Newest stop growing knows nothing new arrived:
	// ingest is idle.
	Newest int64
	// More says rows above the mark wait that this call could not take:
	// more than max, or rows it may take only once the transactions that
	// may still commit ids below them have ended (markStep).
	More bool
	// DatabaseCPU is the CPU time PostgreSQL's backend spent on the batch
	// (its /proc entry read before and after, at proccpu.Resolution),
	// when DatabaseCPUKnown: the database runs on this machine. The
	// indexer counts it (package textindex says why it paces by wall time).
	DatabaseCPU      time.Duration
	DatabaseCPUKnown bool
}

type textEntry struct {
	seq    int64
	ids    []int64
	lo, hi *int64
}

// IndexText writes the documents of at most max waiting rows (the newest
// first) and takes them off the queue, in one transaction: the claim and
// the documents commit together, so a process killed in between leaves
// the entries to the next claim, and concurrent indexers (SKIP LOCKED)
// never take the same entry. The step holds the text documents' lock
// (lockTextDocuments) from its first statement: a statement that deletes
// or seals rows deletes their documents only once it holds that lock too
// (migration 00130), so no document outlives its row or keeps a sealed
// row's text in plain. No row of dead_messages is locked: a row lock
// writes the row's page again, with a full image of it once a checkpoint
// passed since the page was written, which in a drain of a backlog is
// nearly every page (docs/BENCHMARKS.md, "WAL of a drain"). So nothing
// the indexer does holds up a writer of a row either: a redelivery's
// match (matchRedelivery) never passes over a row because of it.
func (s *Store) IndexText(ctx context.Context, max int) (TextIndexResult, error) {
	if max <= 0 {
		max = TextIndexBatchDefault
	}
	var res TextIndexResult
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("store: index text: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	backend := int(tx.Conn().PgConn().PID())
	cpuBefore, cpuKnown := proccpu.Of(backend, postgresComm)
	if err := lockTextDocuments(ctx, tx); err != nil {
		return res, err
	}
	// With text search off the mark stays: the rows stored meanwhile
	// get their documents once it is on again.
	var fresh []int64
	if s.text {
		if fresh, err = markStep(ctx, tx, max, &res); err != nil {
			return res, fmt.Errorf("store: index text: %w", err)
		}
	}
	// Changed rows get at least a quarter of the batch, however busy
	// ingest keeps the mark.
	room := max - len(fresh)
	if room < max/4 {
		room = cmp.Or(max/4, 1)
	}
	rows, err := tx.Query(ctx, `SELECT seq, ids, lo, hi FROM text_index_queue ORDER BY seq DESC LIMIT $1 FOR UPDATE SKIP LOCKED`, textQueueClaim)
	if err != nil {
		return res, fmt.Errorf("store: index text: claim: %w", err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (textEntry, error) {
		var e textEntry
		return e, r.Scan(&e.seq, &e.ids, &e.lo, &e.hi)
	})
	if err != nil {
		return res, fmt.Errorf("store: index text: claim: %w", err)
	}
	queued, batch := takeTextEntries(entries, room)
	ids := append(fresh, queued...)
	if len(ids) > 0 {
		slices.Sort(ids)
		ids = slices.Compact(ids)
		if res.Documents, err = writeDocuments(ctx, tx, ids); err != nil {
			return res, err
		}
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return res, fmt.Errorf("store: index text: take %d rows off the queue: %w", len(queued), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("store: index text: commit %d rows: %w", len(ids), err)
	}
	res.Rows = len(ids)
	if cpuKnown {
		if after, ok := proccpu.Of(backend, postgresComm); ok && after >= cpuBefore {
			res.DatabaseCPU, res.DatabaseCPUKnown = after-cpuBefore, true
		}
	}
	return res, nil
}

// textDocumentsLock is the first key of the text documents' advisory
// lock; the second is dead_messages' oid, so that each schema has its
// own. Migration 00130's triggers take the same pair shared.
const textDocumentsLock = 1684828532

// lockTextDocuments takes the text documents' lock for the rest of tx,
// exclusively: it waits for statements that delete or seal rows to commit
// (their documents deleted) and keeps new ones waiting until tx ends, so
// the statements of tx that follow see such rows gone or sealed, and a
// document tx writes is seen by them.
func lockTextDocuments(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, 'dead_messages'::regclass::oid::int)`, textDocumentsLock); err != nil {
		return fmt.Errorf("store: index text: take the text documents' lock: %w", err)
	}
	return nil
}

// postgresComm is the command name of PostgreSQL's processes, backends
// included, on Linux (their titles change only the command line).
const postgresComm = "postgres"

// writeDocuments writes the documents of the plain rows among ids.
// The document: the failure text and header values at weight A, the
// body's words after them at the default D, so that a caller who may not
// see bodies is answered from the A part alone (ts_filter).
//
// It and textOf read their rows one primary-key probe per id (LATERAL ...
// LIMIT 1, which the planner cannot turn into a join): as a join, a plan
// made for a table of a few hundred thousand rows, or one PostgreSQL
// believes empty, reads the whole table and hashes it for a step's 2,000
// ids. No row is locked (IndexText says why).
func writeDocuments(ctx context.Context, tx pgx.Tx, ids []int64) (int, error) {
	docs, err := textOf(ctx, tx, ids)
	if err != nil {
		return 0, fmt.Errorf("store: index text of %d rows: %w", len(ids), err)
	}
	tag, err := tx.Exec(ctx, `
INSERT INTO message_text (id, document)
SELECT m.id, setweight(dlq_search_document(m.failure_type, m.failure_message, m.failure, u.s, m.body, 0), 'A') ||
    dlq_search_document(NULL, NULL, NULL, NULL, m.body, coalesce(m.body_text_bytes, u.b))
FROM unnest($1::bigint[], $2::int[], $3::text[]) AS u(id, b, s),
    LATERAL (SELECT * FROM dead_messages d WHERE d.id = u.id AND d.enc_key_id IS NULL LIMIT 1) m
ON CONFLICT (id) DO UPDATE SET document = EXCLUDED.document`, docs.ids, docs.bodyBytes, docs.headerText)
	if err != nil {
		return 0, fmt.Errorf("store: index text: write documents of %d rows: %w", len(ids), err)
	}
	return int(tag.RowsAffected()), nil
}

// markStep moves the mark (text_index_mark, migration 00090) and returns
// the plain rows it passed, at most max, for their documents to be
// written in tx. Ids are drawn from a sequence, so the rows of concurrent
// transactions commit out of id order: the mark must never pass an id
// that a running transaction may still commit. So it moves in two steps.
// First it notes a target, the newest id stored (next_id), with the
// transactions holding dead_messages to write then (next_writers: every
// writer takes ROW EXCLUSIVE on the table before it draws an id, and
// keeps it until it ends). Every id below the target was drawn before
// the target's row was stored, so by a transaction that has committed,
// or rolled back, or is among those. Once none of them runs any more,
// every row below the target that will ever be visible is, and the mark
// walks up to it, max ids a call; there it notes the next target. Only
// writers of dead_messages hold it back, never a long transaction
// elsewhere. A row sealed meanwhile gets no document; a deleted one is
// passed. Another indexer holding the mark (FOR UPDATE SKIP LOCKED)
// leaves this call the queue's entries only.
func markStep(ctx context.Context, tx pgx.Tx, max int, res *TextIndexResult) ([]int64, error) {
	var (
		last, newest int64
		next         *int64
		ended        bool
	)
	err := tx.QueryRow(ctx, `SELECT last_id, next_id, (SELECT coalesce(max(id), 0) FROM dead_messages),
    NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'virtualxid' AND l.virtualxid = ANY(next_writers))
FROM text_index_mark FOR UPDATE SKIP LOCKED`, planEachTime).Scan(&last, &next, &newest, &ended)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another indexer holds the mark (or it is gone): whatever waits
		// above it is that one's, or waits for it to let go. Newest still
		// says whether ingest is busy, so that this indexer keeps to its
		// duty cycle while it takes queue entries (it took them at full
		// speed, beside a busy ingest, on every instance but one).
		err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM text_index_mark), (SELECT coalesce(max(id), 0) FROM dead_messages)`).
			Scan(&res.More, &res.Newest)
		if err != nil {
			return nil, fmt.Errorf("look for the mark: %w", err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the mark: %w", err)
	}
	res.Newest = newest
	var fresh []int64
	to := last
	if next != nil && ended && last < *next {
		// A range of at most max ids, not "the first max above the mark":
		// without statistics on dead_messages (below planEachTime) the
		// planner reads a LIMIT's whole range, up to the target, and sorts
		// it, which made each step cost as much as the backlog (28 ms at
		// 19,000 ids, 190 ms at a drain's). Ids come from a sequence, so a
		// range holds at most max rows, fewer where transactions rolled
		// back or rows were deleted.
		to = min(*next, last+int64(max))
		rows, err := tx.Query(ctx, `SELECT id FROM dead_messages WHERE id > $1 AND id <= $2 AND enc_key_id IS NULL ORDER BY id`,
			planEachTime, last, to)
		if err != nil {
			return nil, fmt.Errorf("read the ids above the mark %d: %w", last, err)
		}
		if fresh, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return nil, fmt.Errorf("read the ids above the mark %d: %w", last, err)
		}
	}
	switch {
	case next != nil && to < *next:
		// More to walk before the target.
		res.More = true
		_, err = tx.Exec(ctx, `UPDATE text_index_mark SET last_id = $1`, to)
	case newest > to:
		// At the target (or none yet), with newer rows: the next target.
		// The writers are read after the statement's snapshot, which
		// finds the newest id: one that drew an id below it then either
		// has ended by the time they are read (committed: later
		// statements see its rows) or is among them.
		res.More = true
		_, err = tx.Exec(ctx, `UPDATE text_index_mark SET last_id = $1,
    next_id = (SELECT coalesce(max(id), 0) FROM dead_messages),
    next_writers = ARRAY(SELECT l.virtualtransaction FROM pg_locks l
        WHERE l.locktype = 'relation' AND l.relation = 'dead_messages'::regclass AND l.mode = 'RowExclusiveLock'
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND l.pid <> pg_backend_pid())`, planEachTime, to)
	case to != last:
		_, err = tx.Exec(ctx, `UPDATE text_index_mark SET last_id = $1`, to)
	}
	if err != nil {
		return nil, fmt.Errorf("move the mark from %d to %d: %w", last, to, err)
	}
	return fresh, nil
}

// takeTextEntries takes at most max ids from the claimed entries, the
// newest first (the end of a list or range first), and queues what
// leaves the queue: an entry taken whole is deleted, one taken in part
// keeps the rest.
func takeTextEntries(entries []textEntry, max int) ([]int64, *pgx.Batch) {
	var (
		ids  []int64
		done []int64
		b    pgx.Batch
	)
	for _, e := range entries {
		room := max - len(ids)
		if room <= 0 {
			break
		}
		switch {
		case e.ids != nil && len(e.ids) <= room:
			ids = append(ids, e.ids...)
			done = append(done, e.seq)
		case e.ids != nil:
			ids = append(ids, e.ids[len(e.ids)-room:]...)
			b.Queue(`UPDATE text_index_queue SET ids = $2 WHERE seq = $1`, e.seq, e.ids[:len(e.ids)-room])
		default:
			lo := *e.lo
			if *e.hi-lo > int64(room) {
				lo = *e.hi - int64(room)
				b.Queue(`UPDATE text_index_queue SET hi = $2 WHERE seq = $1`, e.seq, lo)
			} else {
				done = append(done, e.seq)
			}
			for id := lo; id < *e.hi; id++ {
				ids = append(ids, id)
			}
		}
	}
	if len(done) > 0 {
		b.Queue(`DELETE FROM text_index_queue WHERE seq = ANY($1)`, done)
	}
	return ids, &b
}

// textParts are what of each plain row the indexer works out in Go, as
// parallel arrays: the application's header values (HeaderText), and how
// much of the body is text for a row ingest did not mark (BodyTextBytes;
// NULL: the row's own body_text_bytes).
type textParts struct {
	ids        []int64
	bodyBytes  []*int32
	headerText []*string
}

// textOf reads the plain rows among ids and works out their textParts:
// ingest leaves the header text to the indexer (decoding the headers'
// JSON was most of what text search cost ingest on the Go side), and
// marks bodies only while text search is on.
func textOf(ctx context.Context, tx pgx.Tx, ids []int64) (textParts, error) {
	rows, err := tx.Query(ctx, `SELECT m.id, m.headers, coalesce(m.failure_type, ''), coalesce(m.failure_message, ''), m.failure,
    CASE WHEN m.body_text_bytes IS NULL THEN m.body END, CASE WHEN m.body_text_bytes IS NULL THEN m.properties END
FROM unnest($1::bigint[]) AS u(id),
    LATERAL (SELECT * FROM dead_messages d WHERE d.id = u.id AND d.enc_key_id IS NULL LIMIT 1) m`, ids)
	if err != nil {
		return textParts{}, fmt.Errorf("read rows: %w", err)
	}
	defer rows.Close()
	var p textParts
	for rows.Next() {
		var (
			id               int64
			m                NewMessage
			headers, failure []byte
			body, props      []byte
		)
		if err := rows.Scan(&id, &headers, &m.FailureType, &m.FailureMessage, &failure, &body, &props); err != nil {
			return textParts{}, fmt.Errorf("read rows: %w", err)
		}
		m.Headers, m.Failure = headers, failure
		var b *int32
		if body != nil {
			n := int32(BodyTextBytes(body, props))
			b = &n
		}
		p.ids, p.bodyBytes, p.headerText = append(p.ids, id), append(p.bodyBytes, b), append(p.headerText, searchText(&m))
	}
	if err := rows.Err(); err != nil {
		return textParts{}, fmt.Errorf("read rows: %w", err)
	}
	return p, nil
}

// TextWaiting returns how many rows wait for a document: the ids above
// the mark (sealed, deleted and never committed ones count until the mark
// passes them) and the queue's (an entry's ids, or its range's width).
func (s *Store) TextWaiting(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT greatest((SELECT coalesce(max(id), 0) FROM dead_messages) - `+textMarkSQL+`, 0) +
    (SELECT coalesce(sum(coalesce(cardinality(ids), hi - lo)), 0) FROM text_index_queue)::bigint`, planEachTime).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count rows waiting for text documents: %w", err)
	}
	return n, nil
}

// textMarkSQL is the mark: every plain row with an id up to it has its
// document (markStep).
const textMarkSQL = `coalesce((SELECT last_id FROM text_index_mark), 0)`

// textBehind reports whether more rows wait for a document than a search
// reads (TextTailMax of each kind): the rows above the mark, through the
// primary key, and the newest TextTailMax+1 queue entries, through the
// queue's.
func textBehind(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (bool, error) {
	var behind bool
	err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM (SELECT 1 FROM dead_messages WHERE id > `+textMarkSQL+` LIMIT $1 + 1) a) > $1
    OR (SELECT coalesce(sum(coalesce(cardinality(q.ids), q.hi - q.lo)), 0)
        FROM (SELECT ids, lo, hi FROM text_index_queue ORDER BY seq DESC LIMIT $1 + 1) q) > $1`, planEachTime, TextTailMax).Scan(&behind)
	if err != nil {
		return false, fmt.Errorf("store: count rows waiting for text documents: %w", err)
	}
	return behind, nil
}

// textTailSQL renders the ids of the rows waiting for a document that a
// search reads one by one, as an array: the newest TextTailMax above the
// mark, through the primary key, and the newest TextTailMax of the
// queue, through the queue's.
func textTailSQL() string {
	tail := strconv.Itoa(TextTailMax)
	return `(ARRAY(SELECT a.id FROM dead_messages a WHERE a.id > ` + textMarkSQL + ` ORDER BY a.id DESC LIMIT ` + tail + `) ||
	ARRAY(SELECT i FROM (SELECT q.seq, q.ids, q.lo, q.hi FROM text_index_queue q ORDER BY q.seq DESC LIMIT ` + tail + `) q
	CROSS JOIN LATERAL unnest(coalesce(q.ids, ARRAY(SELECT generate_series(greatest(q.lo, q.hi - ` + tail + `), q.hi - 1)))) AS i
	LIMIT ` + tail + `))`
}

// queueReturnedText names rows returned to record in the ingest
// transaction: their documents change (new rows wait above the mark).
func queueReturnedText(b *pgx.Batch, returned []int64) {
	b.Queue(`INSERT INTO text_index_queue (ids) VALUES ($1)`, returned)
}

// queueReturnedTextIndexed queues those of the returned rows that have a
// document, for a store with text search off: the rest wait for a text
// backfill like every row stored meanwhile, and the queue does not grow
// where text search stays off.
func queueReturnedTextIndexed(b *pgx.Batch, returned []int64) {
	b.Queue(`INSERT INTO text_index_queue (ids)
SELECT array_agg(id ORDER BY id) FROM message_text WHERE id = ANY($1) HAVING count(*) > 0`, returned)
}

// ReplayRunning reports whether a replay task is publishing now (running;
// not scheduled, nor waiting on its canary): the text indexer keeps
// to its duty cycle meanwhile, as while ingest is busy, so that catching
// up does not take the replay's share of the machine. Read through the
// partial index of unfinished tasks (replay_tasks_active, whose predicate
// 'running' implies).
func (s *Store) ReplayRunning(ctx context.Context) (bool, error) {
	var running bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM replay_tasks WHERE status = 'running')`).Scan(&running)
	if err != nil {
		return false, fmt.Errorf("store: look for running replays: %w", err)
	}
	return running, nil
}
