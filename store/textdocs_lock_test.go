package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// The text indexer and the statements that delete or seal rows meet on an
// advisory lock, not on row locks (migration 00130). These tests hold one
// side open in a transaction of their own and check that the other waits
// for it and leaves no document behind.

// waitBlockedBy waits until some session waits for a lock tx holds.
func waitBlockedBy(t *testing.T, db *pgxpool.Pool, tx pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	var holder int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	require.Eventually(t, func() bool {
		var waits bool
		return db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, holder).Scan(&waits) == nil && waits
	}, 10*time.Second, 10*time.Millisecond, "nothing waits for the held transaction")
}

// TestTextIndexLocksNoRows: writing documents locks no row of
// dead_messages. A row lock writes the row's page again (a WAL record,
// and a full page image once a checkpoint passed since the page was
// written): in a drain of a million dead letters that was 2.6 KB of WAL
// a message.
func TestTextIndexLocksNoRows(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ingest(t, st, textMsg("orders", `{"fruit":"jabuticaba"}`, 1), textMsg("orders", `{"fruit":"jabuticaba"}`, 2))
	require.Zero(t, count(t, db, "xmax <> '0'"), "fresh rows")
	require.Equal(t, 2, dlqtest.IndexText(t, st))
	require.Equal(t, 2, count(t, db, "id IN (SELECT id FROM message_text)"))
	require.Zero(t, count(t, db, "xmax <> '0'"), "the indexer left a lock on its rows")
}

// TestTextIndexWaitsForDelete: a row deleted by a transaction still open
// gets no document from an indexer that starts meanwhile: the indexer
// waits for the delete to commit, then no longer sees the row. (Without
// the wait it read the row, which the uncommitted delete leaves visible,
// and wrote a document that outlived it.)
func TestTextIndexWaitsForDelete(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ingest(t, st, textMsg("orders", `{"fruit":"cherimoya"}`, 1), textMsg("orders", `{"fruit":"cherimoya"}`, 2))
	ids := messageIDs(t, db, "TRUE")
	queueAsChanged(t, db)

	del, err := db.Begin(ctx)
	require.NoError(t, err)
	defer del.Rollback(ctx) //nolint:errcheck // ends the delete when the test fails first
	_, err = del.Exec(ctx, `DELETE FROM dead_messages WHERE id = $1`, ids[0])
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { _, err := st.IndexText(ctx, 0); done <- err }()
	waitBlockedBy(t, db, del)
	require.NoError(t, del.Commit(ctx))
	require.NoError(t, <-done)
	require.Equal(t, []int64{ids[1]}, textDocumentIDs(t, db))
}

// TestDeleteWaitsForTextIndex: a row deleted while an indexer's step that
// wrote its document is still open loses the document once the step
// commits: the delete waits for the step, then sees the document. (The
// step is played by hand: the lock IndexText takes, then its write.)
func TestDeleteWaitsForTextIndex(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ingest(t, st, textMsg("orders", `{"fruit":"pitanga"}`, 1))
	id := messageIDs(t, db, "TRUE")[0]

	step, err := db.Begin(ctx)
	require.NoError(t, err)
	defer step.Rollback(ctx) //nolint:errcheck // ends the step when the test fails first
	_, err = step.Exec(ctx, `SELECT pg_advisory_xact_lock(1684828532, 'dead_messages'::regclass::oid::int)`)
	require.NoError(t, err)
	_, err = step.Exec(ctx, `INSERT INTO message_text (id, document) VALUES ($1, to_tsvector('simple', 'pitanga'))`, id)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := st.Delete(ctx, store.Filter{IDs: []int64{id}, Status: "all"}, store.Actor{Name: "t"}, store.ActionOptions{})
		done <- err
	}()
	waitBlockedBy(t, db, step)
	require.NoError(t, step.Commit(ctx))
	require.NoError(t, <-done)
	require.Zero(t, count(t, db, "TRUE"))
	require.Empty(t, textDocumentIDs(t, db), "the document outlived its row")
}

// TestTextIndexWaitsForSealing: a row sealed by a transaction still open
// gets no document from an indexer that starts meanwhile, so its text
// never reaches the index in plain; and sealing a row with a document
// deletes it.
func TestTextIndexWaitsForSealing(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ingest(t, st, textMsg("orders", `{"fruit":"soursop"}`, 1), textMsg("orders", `{"fruit":"soursop"}`, 2))
	ids := messageIDs(t, db, "TRUE")
	queueAsChanged(t, db)
	const seal = `UPDATE dead_messages SET enc_key_id = 'k1', enc_dek = '\x00', enc_nonce = '\x00', enc_meta = '\x00' WHERE id = $1`

	sealing, err := db.Begin(ctx)
	require.NoError(t, err)
	defer sealing.Rollback(ctx) //nolint:errcheck // ends the sealing when the test fails first
	_, err = sealing.Exec(ctx, seal, ids[0])
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { _, err := st.IndexText(ctx, 0); done <- err }()
	waitBlockedBy(t, db, sealing)
	require.NoError(t, sealing.Commit(ctx))
	require.NoError(t, <-done)
	require.Equal(t, []int64{ids[1]}, textDocumentIDs(t, db), "only the plain row has a document")

	_, err = db.Exec(ctx, seal, ids[1])
	require.NoError(t, err)
	require.Empty(t, textDocumentIDs(t, db), "a sealed row kept its document")
}

// queueAsChanged puts every row below the indexer's mark and names them
// in its queue, so that one IndexText writes their documents (new rows
// take two: the mark moves in two steps).
func queueAsChanged(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	_, err := db.Exec(context.Background(), `UPDATE text_index_mark SET last_id = (SELECT max(id) FROM dead_messages), next_id = NULL;
INSERT INTO text_index_queue (ids) SELECT array_agg(id) FROM dead_messages`)
	require.NoError(t, err)
}

func textDocumentIDs(t *testing.T, db *pgxpool.Pool) []int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT id FROM message_text ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}
