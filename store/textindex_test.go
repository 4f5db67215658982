package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proccpu"
	"github.com/dlq/dlq/store"
)

// storeOn opens a further store with text search on, on the schema of
// dsn, configured as cfg otherwise.
func storeOn(t *testing.T, dsn string, cfg store.Config) *store.Store {
	t.Helper()
	cfg.DatabaseURL, cfg.MaxConns, cfg.TextSearch = dsn, 2, true
	st, err := store.Open(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// find returns the ids a search across every status finds, and whether
// the answer says rows waiting for the indexer were left unsearched.
func find(t *testing.T, st *store.Store, q string, opt store.ListOptions) ([]int64, bool) {
	t.Helper()
	opt.Limit = 100
	page, err := st.ListMessages(context.Background(), store.Filter{Status: "all", Query: q}, opt)
	require.NoError(t, err, "q=%q", q)
	var ids []int64
	for _, m := range page.Messages {
		ids = append(ids, m.ID)
	}
	return ids, page.TextIncomplete
}

// TestTextSearchBeforeIndexing: a message whose document the indexer has
// not written yet is found by its body and failure words through the
// newest waiting rows (store.TextTailMax); when more rows wait than that,
// the answer says so; once the indexer has run, its header words too.
func TestTextSearchBeforeIndexing(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()

	// Rows that waited longer than the tail reaches: a range of ids (as
	// migration 00079 queues the rows stored before it).
	_, err := db.Exec(ctx, `INSERT INTO text_index_queue (lo, hi) VALUES (1000000, $1)`, 1000000+store.TextTailMax+5)
	require.NoError(t, err)
	m := textMsg("orders", `{"note":"parcel quarantined by customs at Rotterdam"}`, 1)
	m.FailureType = "CustomsHold"
	m.FailureMessage = "held"
	m.Failure = json.RawMessage(`{"stack":"at Shop.Ledger.Compactor.Run()"}`)
	m.Headers = json.RawMessage(`{"x-customer":"Greta Vikander"}`)
	ingest(t, st, m)
	id := messageIDs(t, db, "TRUE")[0]

	for _, q := range []string{"quarantined by customs", "Rotter*", "Ledger Compactor"} {
		ids, incomplete := find(t, st, q, store.ListOptions{})
		require.Equal(t, []int64{id}, ids, "q=%q before the indexer ran", q)
		require.True(t, incomplete, "q=%q: more rows wait than a search reads", q)
	}
	ids, _ := find(t, st, "quarantined", store.ListOptions{NoBodySearch: true})
	require.Empty(t, ids, "no body words for a caller without bodies")
	ids, _ = find(t, st, "Vikander Greta", store.ListOptions{})
	require.Empty(t, ids, "header words wait for the indexer (the whole value is a key)")

	require.Equal(t, store.TextTailMax+5+1, dlqtest.IndexText(t, st))
	waiting, err := st.TextWaiting(ctx)
	require.NoError(t, err)
	require.Zero(t, waiting)
	for _, q := range []string{"quarantined by customs", "Ledger Compactor", "Vikander"} {
		ids, incomplete := find(t, st, q, store.ListOptions{})
		require.Equal(t, []int64{id}, ids, "q=%q after the indexer ran", q)
		require.False(t, incomplete, "q=%q", q)
	}
	ids, _ = find(t, st, "Vikander", store.ListOptions{NoBodySearch: true})
	require.Equal(t, []int64{id}, ids, "header words for a caller without bodies")
	ids, _ = find(t, st, "quarantined", store.ListOptions{NoBodySearch: true})
	require.Empty(t, ids, "no body words for a caller without bodies")
}

// TestTextIndexersConcurrent: two indexers on one schema, each with a
// store of its own, take every waiting row exactly once between them and
// miss none.
func TestTextIndexersConcurrent(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	st2 := storeOn(t, dsn, store.Config{})

	const batches, per = 30, 40
	for b := range batches {
		msgs := make([]store.NewMessage, per)
		for i := range msgs {
			msgs[i] = textMsg("orders", fmt.Sprintf(`{"n":%d,"text":"kiwi mango"}`, b*per+i), int64(b*per+i+1))
		}
		ingest(t, st, msgs...)
	}
	var (
		wg           sync.WaitGroup
		mu           sync.Mutex
		rows         int
		errs         []error
		tctx, cancel = context.WithTimeout(ctx, time.Minute)
	)
	defer cancel()
	for _, s := range []*store.Store{st, st2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tctx.Err() == nil {
				res, err := s.IndexText(tctx, 75) // not a multiple of a batch: entries are split
				mu.Lock()
				rows += res.Rows
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil || (res.Rows == 0 && !res.More) {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	dlqtest.IndexText(t, st) // what one left while the other held it
	require.Equal(t, batches*per, rows, "every row taken exactly once")
	require.Equal(t, batches*per, count(t, db, "id IN (SELECT id FROM message_text)"))
	require.Zero(t, count(t, db, "id IN (SELECT unnest(ids) FROM text_index_queue)"))
	ids, _ := find(t, st, "kiwi mango", store.ListOptions{})
	require.Len(t, ids, 100) // the page
}

// TestTextIndexClaimDies: a batch whose transaction dies (its context
// cancelled while it waits) leaves its rows queued, and the next batch
// indexes them.
func TestTextIndexClaimDies(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	st2 := storeOn(t, dsn, store.Config{})
	ingest(t, st, textMsg("orders", `{"fruit":"durian"}`, 1), textMsg("orders", `{"fruit":"durian"}`, 2))
	first := messageIDs(t, db, "TRUE")[0]
	queueAsChanged(t, db)

	// A document of one of the rows written and not committed, so that
	// the batch, having claimed the entry, waits to write its own.
	hold, err := db.Begin(ctx)
	require.NoError(t, err)
	defer hold.Rollback(ctx) //nolint:errcheck // ends the hold
	_, err = hold.Exec(ctx, `INSERT INTO message_text (id, document) VALUES ($1, to_tsvector('simple', 'held'))`, first)
	require.NoError(t, err)

	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := st.IndexText(bctx, 0); done <- err }()
	waitBlockedBy(t, db, hold)
	var claimed int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM text_index_queue
WHERE seq NOT IN (SELECT seq FROM text_index_queue FOR UPDATE SKIP LOCKED)`).Scan(&claimed))
	require.Equal(t, 1, claimed, "the waiting batch holds the entry")

	cancel()
	require.Error(t, <-done, "the batch died")
	require.NoError(t, hold.Rollback(ctx))
	var entries int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM text_index_queue`).Scan(&entries))
	require.Equal(t, 1, entries, "the dead batch's entry is back")
	// The dead batch's backend lets go once it has seen its connection
	// closed; until then its entry stays locked and is passed over.
	taken := 0
	require.Eventually(t, func() bool {
		res, err := st2.IndexText(ctx, 0)
		require.NoError(t, err)
		taken += res.Rows
		return taken == 2
	}, 10*time.Second, 10*time.Millisecond, "the rows are still queued and indexed by a later batch")
	require.Equal(t, 2, count(t, db, "id IN (SELECT id FROM message_text)"))
}

// TestTextDocumentsFollowRows: deleting messages deletes their documents;
// a message coming back from a replay, and an imported one, are indexed
// again with their new text; sealing a row deletes its document.
func TestTextDocumentsFollowRows(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	a := textMsg("orders", `{"fruit":"rambutan"}`, 1)
	a.Headers = json.RawMessage(`{"x-note":"first blue note"}`)
	ingest(t, st, a)
	ingest(t, st, textMsg("orders", `{"fruit":"rambutan"}`, 2))
	ab := messageIDs(t, db, "TRUE")
	aID, bID := ab[0], ab[1]
	dlqtest.IndexText(t, st)
	require.Equal(t, 2, count(t, db, "id IN (SELECT id FROM message_text)"))

	// Back from a replay with a new death: indexed again.
	again := a
	again.DLQID, again.ReplayID, again.Fingerprint = aID, "r1", 3
	again.Headers = json.RawMessage(`{"x-note":"second green note"}`)
	_, res := ingest(t, st, again)
	require.Equal(t, 1, res.Returned)
	require.Equal(t, 1, dlqtest.IndexText(t, st))
	ids, _ := find(t, st, "green note", store.ListOptions{})
	require.Equal(t, []int64{aID}, ids)
	ids, _ = find(t, st, "blue note", store.ListOptions{})
	require.Empty(t, ids)

	// Deleted: the document goes with the row.
	_, err := st.Delete(ctx, store.Filter{IDs: []int64{bID}, Status: "all"}, store.Actor{Name: "t"}, store.ActionOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, count(t, db, "id IN (SELECT id FROM message_text)"))
	ids, _ = find(t, st, "rambutan", store.ListOptions{})
	require.Equal(t, []int64{aID}, ids)

	// Imported: queued in the import's transaction.
	im := textMsg("orders", `{"fruit":"mangosteen"}`, 4)
	sent := false
	_, err = st.ImportMessages(ctx, func() (store.ImportMessage, error) {
		if sent {
			return store.ImportMessage{}, io.EOF
		}
		sent = true
		return store.ImportMessage{Message: im, From: store.ImportOrigin{Origin: "5f0c8a52-7a57-4c61-9d5e-2f7c2a0e9b11", ID: 7}}, nil
	}, store.Actor{Name: "t"})
	require.NoError(t, err)
	require.Equal(t, 1, dlqtest.IndexText(t, st))
	ids, _ = find(t, st, "mangosteen", store.ListOptions{})
	require.Len(t, ids, 1)

	// Sealed by rekey: its document is deleted in the same transaction.
	ring := newRing(t, newKey(t, "k1"))
	sealing := openStore(t, dsn, ring, nil)
	_, err = sealing.RekeyMessages(ctx, rekeyLease(t, sealing), 0, 10)
	require.NoError(t, err)
	require.Zero(t, count(t, db, "id IN (SELECT id FROM message_text)"))
	require.Zero(t, count(t, db, "enc_key_id IS NULL"))
	require.Zero(t, dlqtest.IndexText(t, st))
}

// TestIndexTextReportsNewestWithoutTheMark: an indexer that finds the mark
// held by another still reports the newest message id, by which it keeps
// to its duty cycle while ingest is busy (0 made it take queue entries at
// full speed).
func TestIndexTextReportsNewestWithoutTheMark(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ingest(t, st, textMsg("orders", `{"n":1}`, 1), textMsg("orders", `{"n":2}`, 2))
	newest := messageIDs(t, db, "TRUE")[1]
	other, err := db.Begin(ctx)
	require.NoError(t, err)
	defer other.Rollback(ctx) //nolint:errcheck // the other indexer lets go
	_, err = other.Exec(ctx, `SELECT 1 FROM text_index_mark FOR UPDATE`)
	require.NoError(t, err)
	res, err := st.IndexText(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, res.Rows, "the rows above the mark are the other indexer's")
	require.Equal(t, newest, res.Newest)
}

// TestReturnWhileTextSearchIsOff: a message that comes back from a
// replay through an instance with text search off is indexed again by
// the next indexer that runs, so its new words are found and its old
// ones no longer are. It kept its old document for good: below the mark,
// with a document, neither the indexer nor -backfill-text came back to it.
func TestReturnWhileTextSearchIsOff(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	a := textMsg("orders", `{"fruit":"durian"}`, 1)
	a.Headers = json.RawMessage(`{"x-note":"old crimson frame"}`)
	ingest(t, st, a)
	never := textMsg("orders", `{"fruit":"salak"}`, 2)
	ingest(t, st, never)
	ids := messageIDs(t, db, "TRUE")
	dlqtest.IndexText(t, st)
	// A row below the mark without a document (stored with text search
	// off by a dlq from before the mark): not queued by a return through
	// an instance with text search off, so the queue does not grow there.
	_, err := db.Exec(ctx, `DELETE FROM message_text WHERE id = $1`, ids[1])
	require.NoError(t, err)

	off, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2, TextSearch: false})
	require.NoError(t, err)
	t.Cleanup(off.Close)
	back := a
	back.DLQID, back.ReplayID, back.Fingerprint = ids[0], "r1", 3
	back.Headers = json.RawMessage(`{"x-note":"new emerald frame"}`)
	backNever := never
	backNever.DLQID, backNever.ReplayID, backNever.Fingerprint = ids[1], "r2", 4
	_, res := ingest(t, off, back, backNever)
	require.Equal(t, 2, res.Returned)
	var queued []int64
	require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(array_agg(i ORDER BY i), '{}') FROM text_index_queue, unnest(ids) i`).Scan(&queued))
	require.Equal(t, []int64{ids[0]}, queued, "the indexed row is queued, the other not")

	require.Equal(t, 1, dlqtest.IndexText(t, st))
	found, _ := find(t, st, "emerald frame", store.ListOptions{})
	require.Equal(t, []int64{ids[0]}, found)
	found, _ = find(t, st, "crimson frame", store.ListOptions{})
	require.Empty(t, found)
}

// TestMigrationTextIndexStoredRows: on a store that already holds
// messages (migrated up to 00078, with the text index it once built),
// 00079 creates the documents' tables and drops the old index
// concurrently, and 00090 starts the indexer's mark at 0, so that the
// indexer writes the stored rows' documents. A database that ran the
// earlier 00079 (which queued every row as one range) gets its mark at
// the newest row: the queue has them.
func TestMigrationTextIndexStoredRows(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ingest(t, st, textMsg("orders", `{"fruit":"cherimoya"}`, 1), textMsg("orders", `{"fruit":"cherimoya"}`, 2))
	// Back to the schema of 00078, rows and all.
	_, err := db.Exec(ctx, `DROP TABLE text_index_mark; DROP TABLE text_index_queue; DROP TABLE message_text;
CREATE INDEX dead_messages_text ON dead_messages
    USING gin (dlq_search_document(failure_type, failure_message, failure, search_text, body, body_text_bytes))
    WHERE status <> 'replaying' AND enc_key_id IS NULL AND body_text_bytes IS NOT NULL;
DELETE FROM goose_db_version WHERE version_id IN (79, 90)`)
	require.NoError(t, err)

	res, err := st.Migrate(ctx, nil)
	require.NoError(t, err)
	require.Len(t, res.Applied, 2)
	ids := messageIDs(t, db, "TRUE")
	mark := func() int64 {
		var last int64
		require.NoError(t, db.QueryRow(ctx, `SELECT last_id FROM text_index_mark`).Scan(&last))
		return last
	}
	require.Zero(t, mark(), "every stored row waits above the mark")
	require.Zero(t, count(t, db, "id IN (SELECT unnest(ids) FROM text_index_queue)"), "and none in the queue")
	var old int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE indexname = 'dead_messages_text' AND schemaname = current_schema()`).Scan(&old))
	require.Zero(t, old, "the old index is dropped")
	require.Equal(t, 2, dlqtest.IndexText(t, st))
	found, _ := find(t, st, "cherimoya", store.ListOptions{})
	require.Len(t, found, 2)

	// As after the earlier 00079: the rows queued as one range.
	_, err = db.Exec(ctx, `DROP TABLE text_index_mark; DELETE FROM message_text; DELETE FROM goose_db_version WHERE version_id = 90`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO text_index_queue (lo, hi) VALUES ($1, $2)`, ids[0], ids[1]+1)
	require.NoError(t, err)
	res, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	require.Len(t, res.Applied, 1)
	require.Equal(t, ids[1], mark(), "the queue holds the stored rows")
	require.Equal(t, 2, dlqtest.IndexText(t, st))
	found, _ = find(t, st, "cherimoya", store.ListOptions{})
	require.Len(t, found, 2)
}

// TestTextMarkWaitsForEarlierIDs: ids are drawn from a sequence, so a
// transaction that drew a lower id may commit after one that drew a
// higher id has. The indexer's mark must not pass the lower id while its
// transaction runs (its row would never get a document), and a search
// finds both rows meanwhile: the committed one through the rows waiting
// above the mark, the other once it commits.
func TestTextMarkWaitsForEarlierIDs(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ingest(t, st, textMsg("orders", `{"fruit":"rambutan"}`, 1))
	dlqtest.IndexText(t, st)
	first := messageIDs(t, db, "TRUE")[0]

	// A writer draws an id and holds its transaction open.
	slow, err := db.Begin(ctx)
	require.NoError(t, err)
	defer slow.Rollback(ctx) //nolint:errcheck // committed below
	var early int64
	require.NoError(t, slow.QueryRow(ctx, `INSERT INTO dead_messages
SELECT r.* FROM dead_messages m, jsonb_populate_record(NULL::dead_messages,
    to_jsonb(m) || jsonb_build_object('id', nextval(pg_get_serial_sequence('dead_messages', 'id')), 'ingest_batch', NULL)) r
WHERE m.id = $1
RETURNING id`, first).Scan(&early))
	_, err = slow.Exec(ctx, `UPDATE dead_messages SET body = convert_to('{"fruit":"salak"}', 'UTF8') WHERE id = $1`, early)
	require.NoError(t, err)

	// Another commits a higher id, and the indexer runs meanwhile.
	ingest(t, st, textMsg("orders", `{"fruit":"mangosteen"}`, 2))
	late := slices.Max(messageIDs(t, db, "TRUE"))
	require.Greater(t, late, early)
	for range 5 {
		_, err := st.IndexText(ctx, 0)
		require.NoError(t, err)
	}
	var mark int64
	require.NoError(t, db.QueryRow(ctx, `SELECT last_id FROM text_index_mark`).Scan(&mark))
	require.Less(t, mark, early, "the mark waits below the id of the running transaction")
	found, incomplete := find(t, st, "mangosteen", store.ListOptions{})
	require.Equal(t, []int64{late}, found, "the newest row, found before its document is written")
	require.False(t, incomplete)

	require.NoError(t, slow.Commit(ctx))
	dlqtest.IndexText(t, st)
	require.Equal(t, 1, count(t, db, "id = $1 AND id IN (SELECT id FROM message_text)", early), "the late commit has its document")
	require.Equal(t, 3, count(t, db, "id IN (SELECT id FROM message_text)"))
	found, _ = find(t, st, "salak", store.ListOptions{})
	require.Equal(t, []int64{early}, found)
	// Now below the mark, found through the documents only.
	require.NoError(t, db.QueryRow(ctx, `SELECT last_id FROM text_index_mark`).Scan(&mark))
	require.GreaterOrEqual(t, mark, late)
}

// TestTextMarkWalksRangesAcrossGaps: the mark walks at most max ids a
// step, and a range that holds fewer rows (ids drawn by transactions that
// rolled back) or none moves it all the same, so every row gets its
// document in steps of bounded cost.
func TestTextMarkWalksRangesAcrossGaps(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ingest(t, st, textMsg("orders", `{"fruit":"rambutan"}`, 1), textMsg("orders", `{"fruit":"durian"}`, 2))
	// Seven ids drawn and never stored: a gap wider than a step.
	_, err := db.Exec(ctx, `SELECT nextval(pg_get_serial_sequence('dead_messages', 'id')) FROM generate_series(1, 7)`)
	require.NoError(t, err)
	ingest(t, st, textMsg("orders", `{"fruit":"longan"}`, 3), textMsg("orders", `{"fruit":"pulasan"}`, 4),
		textMsg("orders", `{"fruit":"langsat"}`, 5))
	ids := messageIDs(t, db, "TRUE")
	require.Len(t, ids, 5)

	const max = 3
	var indexed int
	for step := 0; ; step++ {
		require.Less(t, step, 20, "the mark did not reach the newest row in steps of %d ids", max)
		res, err := st.IndexText(ctx, max)
		require.NoError(t, err)
		require.LessOrEqual(t, res.Rows, max)
		indexed += res.Rows
		if res.Rows == 0 && !res.More {
			break
		}
	}
	require.Equal(t, 5, indexed)
	require.Equal(t, 5, count(t, db, "id IN (SELECT id FROM message_text)"))
	var mark int64
	require.NoError(t, db.QueryRow(ctx, `SELECT last_id FROM text_index_mark`).Scan(&mark))
	require.Equal(t, slices.Max(ids), mark)
	found, incomplete := find(t, st, "pulasan", store.ListOptions{})
	require.Len(t, found, 1)
	require.False(t, incomplete)
}

// TestTextIndexStepsDoNotReadTheTable: the indexer's statements run on
// connections that prepared them while dead_messages was empty, and
// PostgreSQL keeps such a plan until ANALYZE (never, without autovacuum):
// a plan of the empty table reads max(id) and the walk above the mark by
// reading the table whole. After the table has grown, stepping the mark
// across it (and reading the gauge each step, as the indexer does) must
// not read the table (pg_stat_user_tables): a plan of the empty table did
// so twice a step, and the documents' read and insert, as joins, about
// once every two steps (200,080 rows over 21 steps of a 20,008-row table),
// or twice a step once planned for their arguments (800,320 over 23).
// Probing the primary key id by id, the steps read no row by a sequential
// scan; the bound is less than the table once over every step.
func TestTextIndexStepsDoNotReadTheTable(t *testing.T) {
	t.Parallel()
	st, dsn, db := oneConnStore(t)
	ctx := context.Background()

	// The step and the gauge are prepared on the empty table.
	_, err := st.IndexText(ctx, 1)
	require.NoError(t, err)
	_, err = st.TextWaiting(ctx)
	require.NoError(t, err)
	for i := range 8 {
		ingest(t, st, textMsg("orders", fmt.Sprintf(`{"n":%d}`, i), int64(i+1)))
	}

	// The table grows by 20,000 rows, written on a connection that then
	// ends, so its statistics are in before the steps are counted.
	growTable(t, dsn, `SELECT * FROM dead_messages ORDER BY id LIMIT 8`, 2500, "")
	stat := func(table, col string) int64 { return tableStat(t, db, table, col) }
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("dead_messages", "n_tup_ins") == 20008 },
		"the growth's statistics did not arrive")
	before := stat("dead_messages", "seq_tup_read")

	steps := 0
	for range 100 {
		steps++
		res, err := st.IndexText(ctx, 0)
		require.NoError(t, err)
		_, err = st.TextWaiting(ctx)
		require.NoError(t, err)
		if res.Rows == 0 && !res.More {
			break
		}
	}
	st.Close() // its statistics are written as its connection ends
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("message_text", "n_tup_ins") == 20008 },
		"the indexer did not write every document, or its statistics did not arrive")
	read := stat("dead_messages", "seq_tup_read") - before
	t.Logf("the indexer's %d steps read %d rows of dead_messages by sequential scans", steps, read)
	require.Less(t, read, int64(20008), "the indexer's %d steps read %d rows of dead_messages by sequential scans", steps, read)
}

// TestReturnSealedDropsDocument: a plain, indexed message that comes back
// from a replay to a store that seals is sealed in its row, and its
// document goes in the same transaction.
func TestReturnSealedDropsDocument(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	a := textMsg("orders", `{"fruit":"salak"}`, 1)
	ingest(t, st, a)
	aID := messageIDs(t, db, "TRUE")[0]
	require.Equal(t, 1, dlqtest.IndexText(t, st))
	require.Equal(t, 1, count(t, db, "id IN (SELECT id FROM message_text)"))

	sealing := openStore(t, dsn, newRing(t, newKey(t, "k1")), nil)
	again := a
	again.DLQID, again.ReplayID, again.Fingerprint = aID, "r1", 2
	_, res := ingest(t, sealing, again)
	require.Equal(t, 1, res.Returned)
	require.Equal(t, 1, count(t, db, "enc_key_id IS NOT NULL"))
	require.Zero(t, count(t, db, "id IN (SELECT id FROM message_text)"))
}

// TestTextSearchWalksThenAsksTheIndex: a text search reads the newest
// documents one by one (Config.TextWalk of them) and asks the GIN index
// about older ones only when those gave too few matches. Pages of two
// over matches spread below and above the walk's reach come out newest
// first, each once, whichever part found them.
func TestTextSearchWalksThenAsksTheIndex(t *testing.T) {
	t.Parallel()
	dsn := dlqtest.Schema(t)
	ctx := context.Background()
	st := storeOn(t, dsn, store.Config{TextWalk: 4})
	_, err := st.Migrate(ctx, nil)
	require.NoError(t, err)
	db := dlqtest.DB(t, dsn)

	// 12 messages, one at a time so that ids follow their order; every
	// third holds the phrase, so the newest 4 documents hold one match
	// and the index finds the rest.
	for i := range 12 {
		body := `{"note":"an ordinary parcel"}`
		if i%3 == 0 {
			body = `{"note":"parcel quarantined by customs"}`
		}
		ingest(t, st, textMsg("orders", body, int64(1000+i)))
	}
	dlqtest.IndexText(t, st)
	want := messageIDs(t, db, `convert_from(body, 'UTF8') LIKE '%quarantined%'`)
	require.Len(t, want, 4)
	slices.Reverse(want) // newest first
	var got []int64
	var before int64
	for range 10 {
		page, err := st.ListMessages(ctx, store.Filter{Status: "all", Query: "quarantined by customs"}, store.ListOptions{Limit: 2, Before: before})
		require.NoError(t, err)
		for _, m := range page.Messages {
			got = append(got, m.ID)
		}
		if !page.HasMore {
			break
		}
		before = page.LastID
	}
	require.Equal(t, want, got, "newest first, each once, across the walk and the index")
}

// TestReplayRunning: the text indexer's signal to keep to its duty cycle
// is a task that publishes now; a scheduled one or none is not.
func TestReplayRunning(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	running := func() bool {
		t.Helper()
		r, err := st.ReplayRunning(ctx)
		require.NoError(t, err)
		return r
	}
	require.False(t, running(), "no task")
	ids := seedPending(t, st, db, "orders", 2)
	task := newTask(t, st, store.Filter{IDs: ids, Status: "all"})
	require.False(t, running(), "a task not taken yet publishes nothing")
	_, err := db.Exec(ctx, `UPDATE replay_tasks SET status = 'running' WHERE id = $1`, task.ID)
	require.NoError(t, err)
	require.True(t, running())
	_, err = db.Exec(ctx, `UPDATE replay_tasks SET status = 'completed' WHERE id = $1`, task.ID)
	require.NoError(t, err)
	require.False(t, running(), "a finished task")
}

// TestRedeliveryMatchedWhileIndexing: a redelivery whose row the text
// indexer holds (its FOR KEY SHARE while it writes the row's document) is
// still matched to the row, not stored again; and replay claims are not
// held up by it either. With the match locking FOR UPDATE SKIP LOCKED the
// redelivery passed over the held row and the message was stored twice
// (TestFaultKill9 found it).
func TestRedeliveryMatchedWhileIndexing(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ingest(t, st, msg("q", "a", 10))
	id := messageIDs(t, db, "fingerprint = 10")[0]

	// The indexer's hold on the row, in a transaction left open.
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, `SELECT id FROM dead_messages WHERE id = $1 FOR KEY SHARE`, id)
	require.NoError(t, err)

	re := msg("q", "a", 10)
	re.Redelivered = true
	done := make(chan store.IngestResult, 1)
	go func() {
		_, res := ingest(t, st, re)
		done <- res
	}()
	select {
	case res := <-done:
		require.Equal(t, []store.Outcome{store.OutcomeDuplicate}, res.Outcomes, "matched, not stored again")
	case <-time.After(30 * time.Second):
		t.Fatal("the redelivery waited for the indexer's hold")
	}
	require.Equal(t, []int64{id}, messageIDs(t, db, "TRUE"))
}

// TestTextMarkUnderConcurrentIngest: writers ingest batches at once
// (their ids interleave and commit out of order) while an indexer walks
// the mark; once they stop, every row has its document: the mark passed
// none whose transaction committed after it moved.
func TestTextMarkUnderConcurrentIngest(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const writers, batches, per = 4, 15, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				msgs := make([]store.NewMessage, per)
				for i := range msgs {
					n := (w*batches+b)*per + i
					msgs[i] = textMsg("orders", fmt.Sprintf(`{"n":%d,"fruit":"feijoa"}`, n), int64(n+1))
				}
				_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "t", Messages: msgs})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	indexing, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(indexing)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := st.IndexText(ctx, 50); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-indexing
	dlqtest.IndexText(t, st)
	require.Equal(t, writers*batches*per, count(t, db, "id IN (SELECT id FROM message_text)"), "every row has its document")
}

// TestIndexTextReportsDatabaseCPU: the database runs on this machine, so
// each batch says how much CPU its backend spent (what the indexer paces
// itself by): in all, something for thousands of documents, and never
// more than the batches' wall time but for a clock tick each.
func TestIndexTextReportsDatabaseCPU(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	const batches, per = 10, 300
	words := strings.Repeat("papaya guava tamarind soursop rambutan ", 40)
	for b := range batches {
		msgs := make([]store.NewMessage, per)
		for i := range msgs {
			msgs[i] = textMsg("orders", fmt.Sprintf(`{"n":%d,"text":%q}`, b*per+i, words), int64(b*per+i+1))
		}
		ingest(t, st, msgs...)
	}
	var cpu, wall time.Duration
	took := 0
	deadline := time.Now().Add(time.Minute)
	for rows := 0; rows < batches*per; {
		require.True(t, time.Now().Before(deadline), "indexed %d of %d rows in a minute", rows, batches*per)
		start := time.Now()
		res, err := st.IndexText(ctx, 500)
		require.NoError(t, err)
		wall += time.Since(start)
		if res.Rows == 0 {
			time.Sleep(50 * time.Millisecond) // the mark waits for ingest's last transaction to be seen ended
			continue
		}
		require.True(t, res.DatabaseCPUKnown, "PostgreSQL runs on this machine: its backend's CPU is readable")
		cpu += res.DatabaseCPU
		rows += res.Rows
		took++
	}
	require.Positive(t, cpu, "%d batches of documents cost the backend no CPU at all", took)
	require.LessOrEqual(t, cpu, wall+time.Duration(took)*proccpu.Resolution, "more CPU than time")
	t.Logf("%d documents in %d batches: backend CPU %s, wall %s", batches*per, took, cpu, wall)
}

// TestTextIndexTakesAHugeFailureMessage: a failure message of a megabyte
// and more (imported, or from a broker with a raised frame_max) is indexed
// by its first 4,096 characters, and the messages after it are indexed and
// found as usual. Uncut, its document passed PostgreSQL's 1 MB limit of a
// tsvector: the indexer's batch failed at every attempt, and every search
// whose newest waiting rows reached it failed with it.
func TestTextIndexTakesAHugeFailureMessage(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	var text strings.Builder
	text.WriteString("ledger overflow ")
	for i := range 150000 {
		fmt.Fprintf(&text, "tok%06d ", i)
	}
	text.WriteString("farewellword")
	huge := textMsg("orders", `{"note":"first"}`, 1)
	huge.FailureType, huge.FailureMessage = "Overflow", text.String()
	ingest(t, st, huge)
	after := textMsg("orders", `{"note":"parcel quarantined at Rotterdam"}`, 2)
	ingest(t, st, after)
	ids := messageIDs(t, db, "TRUE")
	require.Len(t, ids, 2)

	// Before the indexer: the search reads the waiting rows' documents.
	found, _ := find(t, st, "quarantined", store.ListOptions{})
	require.Equal(t, []int64{ids[1]}, found)
	require.Equal(t, 2, dlqtest.IndexText(t, st))
	for q, want := range map[string][]int64{
		"quarantined":     {ids[1]},
		"ledger overflow": {ids[0]},
		"tok000100":       {ids[0]},
		"farewellword":    nil, // past the 4,096 characters read
	} {
		found, incomplete := find(t, st, q, store.ListOptions{})
		require.Equal(t, want, found, "q=%q", q)
		require.False(t, incomplete, "q=%q", q)
	}
}
