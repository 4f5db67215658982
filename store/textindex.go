package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// The text index off the ingest path (migration 00079). Every path that
// stores or changes a searchable row adds, in its own transaction, one
// entry to text_index_queue naming the rows; IndexText (run by package
// textindex) turns entries into documents in message_text, whose GIN
// index searches read. Rows still waiting are searched through the
// newest TextTailMax of them (textTailSQL), so a message that died a
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
	// Newest is the newest queue entry it took from (0: the queue was
	// empty). Entries are taken newest first, so an indexer that sees
	// Newest stop growing knows nothing new arrived: ingest is idle.
	Newest int64
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
// never take the same entry. Rows are locked FOR KEY SHARE while their
// documents are written (the lock the documents' foreign key takes
// anyway), which conflicts only with FOR UPDATE: a row being sealed
// (RekeyMessages locks FOR UPDATE) is waited for and seen sealed, so it
// gets no document, and one the indexer holds is passed over by the
// sealing pass and sealed later, its document deleted then. Writers that
// change no key lock FOR NO KEY UPDATE, which this lock does not stop: a
// redelivery's match (matchRedelivery) must never pass over a row because
// the indexer holds it, or it would store the message twice.
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
	if len(entries) == 0 {
		return res, nil
	}
	res.Newest = entries[0].seq
	ids, batch := takeTextEntries(entries, max)
	docs, err := textOf(ctx, tx, ids)
	if err != nil {
		return res, fmt.Errorf("store: index text of %d rows: %w", len(ids), err)
	}
	// The document: the failure text and header values at weight A, the
	// body's words after them at the default D, so that a caller who may
	// not see bodies is answered from the A part alone (ts_filter).
	tag, err := tx.Exec(ctx, `
INSERT INTO message_text (id, document)
SELECT m.id, setweight(dlq_search_document(m.failure_type, m.failure_message, m.failure, u.s, m.body, 0), 'A') ||
    dlq_search_document(NULL, NULL, NULL, NULL, m.body, coalesce(m.body_text_bytes, u.b))
FROM unnest($1::bigint[], $2::int[], $3::text[]) AS u(id, b, s) JOIN dead_messages m ON m.id = u.id
WHERE m.enc_key_id IS NULL
ORDER BY m.id FOR KEY SHARE OF m
ON CONFLICT (id) DO UPDATE SET document = EXCLUDED.document`, docs.ids, docs.bodyBytes, docs.headerText)
	if err != nil {
		return res, fmt.Errorf("store: index text: write documents of %d rows: %w", len(ids), err)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return res, fmt.Errorf("store: index text: take %d rows off the queue: %w", len(ids), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("store: index text: commit %d rows: %w", len(ids), err)
	}
	res.Rows, res.Documents = len(ids), int(tag.RowsAffected())
	return res, nil
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
	slices.Sort(ids)
	return slices.Compact(ids), &b
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
	rows, err := tx.Query(ctx, `SELECT id, headers, coalesce(failure_type, ''), coalesce(failure_message, ''), failure,
    CASE WHEN body_text_bytes IS NULL THEN body END, CASE WHEN body_text_bytes IS NULL THEN properties END
FROM dead_messages WHERE id = ANY($1) AND enc_key_id IS NULL`, ids)
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

// TextWaiting returns how many rows wait for a document (an entry's ids,
// or its range's width: sealed and deleted rows count until taken).
func (s *Store) TextWaiting(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(coalesce(cardinality(ids), hi - lo)), 0)::bigint FROM text_index_queue`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count rows waiting for text documents: %w", err)
	}
	return n, nil
}

// textBehind reports whether more rows wait for a document than a search
// reads (TextTailMax): the newest TextTailMax+1 entries, through the
// queue's primary key.
func textBehind(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (bool, error) {
	var behind bool
	err := db.QueryRow(ctx, `SELECT coalesce(sum(coalesce(cardinality(q.ids), q.hi - q.lo)), 0) > $1
FROM (SELECT ids, lo, hi FROM text_index_queue ORDER BY seq DESC LIMIT $1 + 1) q`, TextTailMax).Scan(&behind)
	if err != nil {
		return false, fmt.Errorf("store: count rows waiting for text documents: %w", err)
	}
	return behind, nil
}

// textTailSQL renders the ids of the newest TextTailMax rows waiting for
// a document, as an array, read through the queue's primary key.
func textTailSQL() string {
	tail := strconv.Itoa(TextTailMax)
	return `ARRAY(SELECT i FROM (SELECT q.seq, q.ids, q.lo, q.hi FROM text_index_queue q ORDER BY q.seq DESC LIMIT ` + tail + `) q
	CROSS JOIN LATERAL unnest(coalesce(q.ids, ARRAY(SELECT generate_series(greatest(q.lo, q.hi - ` + tail + `), q.hi - 1)))) AS i
	LIMIT ` + tail + `)`
}

// enqueueBatchText queues one entry naming the rows batch inserted
// (through the ingest_batch index: no ids need reserving before COPY)
// and the rows it returned to record, in the ingest transaction.
func enqueueBatchText(b *pgx.Batch, batch int64, returned []int64) {
	b.Queue(`INSERT INTO text_index_queue (ids)
SELECT array_agg(id) || $2::bigint[] FROM dead_messages WHERE ingest_batch = $1 AND enc_key_id IS NULL
HAVING count(*) > 0 OR cardinality($2::bigint[]) > 0`, batch, returned)
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
