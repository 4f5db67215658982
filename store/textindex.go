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
// never take the same entry. Rows are locked FOR SHARE while their
// documents are written, so a row sealed meanwhile (RekeyMessages) waits
// and deletes the document after, or is seen sealed and gets none.
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
	if err := markText(ctx, tx, ids); err != nil {
		return res, fmt.Errorf("store: index text of %d rows: %w", len(ids), err)
	}
	tag, err := tx.Exec(ctx, `
INSERT INTO message_text (id, document)
SELECT m.id, `+bodyTextSQL("m")+` FROM dead_messages m
WHERE m.id = ANY($1) AND m.enc_key_id IS NULL AND m.body_text_bytes IS NOT NULL
ORDER BY m.id FOR SHARE OF m
ON CONFLICT (id) DO UPDATE SET document = EXCLUDED.document`, ids)
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

// markText writes what of a row is text (body_text_bytes, search_text)
// for the plain rows among ids that have never been looked at: rows
// stored before migration 00078 or while text search was off. Ingest
// writes both for the rows it stores, so this usually finds none.
func markText(ctx context.Context, tx pgx.Tx, ids []int64) error {
	rows, err := tx.Query(ctx, `SELECT id, body, properties, headers, coalesce(failure_type, ''), coalesce(failure_message, ''), failure
FROM dead_messages WHERE id = ANY($1) AND body_text_bytes IS NULL AND enc_key_id IS NULL`, ids)
	if err != nil {
		return fmt.Errorf("read unmarked rows: %w", err)
	}
	var (
		marked []int64
		lens   []int32
		texts  []*string
	)
	for rows.Next() {
		var (
			id              int64
			m               NewMessage
			failure, header []byte
		)
		if err := rows.Scan(&id, &m.Body, &m.Properties, &header, &m.FailureType, &m.FailureMessage, &failure); err != nil {
			rows.Close()
			return fmt.Errorf("read unmarked rows: %w", err)
		}
		m.Headers, m.Failure = header, failure
		marked, lens, texts = append(marked, id), append(lens, int32(BodyTextBytes(m.Body, m.Properties))), append(texts, searchText(&m))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read unmarked rows: %w", err)
	}
	if len(marked) == 0 {
		return nil
	}
	_, err = tx.Exec(ctx, `UPDATE dead_messages d SET body_text_bytes = u.b, search_text = u.s
FROM unnest($1::bigint[], $2::int[], $3::text[]) AS u(id, b, s)
WHERE d.id = u.id AND d.body_text_bytes IS NULL AND d.enc_key_id IS NULL`, marked, lens, texts)
	if err != nil {
		return fmt.Errorf("mark text of %d rows: %w", len(marked), err)
	}
	return nil
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
