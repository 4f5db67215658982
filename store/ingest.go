package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/dlq/dlq/crypt"
)

// IngestBatch is one transaction's worth of dead messages.
type IngestBatch struct {
	// ID is unique per batch and chosen before the first attempt (NewBatchID),
	// so a retry after an unknown commit outcome can find the first attempt.
	ID int64
	// Consumer names the writer, for operators reading ingest_inflight.
	Consumer string
	Messages []NewMessage
	// Confirmed lists earlier batches whose acknowledgements are known to
	// have reached the broker; they leave ingest_inflight in this transaction.
	Confirmed []int64
}

// Outcome is what happened to one message of a batch.
type Outcome uint8

const (
	// OutcomeInserted: a new row.
	OutcomeInserted Outcome = iota + 1
	// OutcomeDuplicate: a redelivery of something already stored; nothing changed.
	OutcomeDuplicate
	// OutcomeReturned: a replayed message died again and its row is pending again.
	OutcomeReturned
)

// IngestResult reports a committed batch.
type IngestResult struct {
	// Outcomes is parallel to the batch's Messages.
	Outcomes                       []Outcome
	Inserted, Duplicates, Returned int
}

// NewBatchID returns a random positive batch id. 63 random bits make a
// collision between two live batches practically impossible.
func NewBatchID() int64 { return rand.Int64() | 1 }

var ingestColumns = []string{
	"message_id", "source_queue", "source_exchange", "source_routing_key", "dead_letter_queue",
	"reason", "death_count", "failure", "failure_type", "failure_message", "properties", "headers",
	"body", "body_size", "first_failed_at", "failed_at", "fingerprint", "ingest_batch",
	"conversion_error", "replay_count", "group_id", "search_keys", "search_hashes", "ingest_returns",
	"x_death", "category", "body_text_bytes",
}

// sealedIngestColumns are ingestColumns for sealed rows (seal.go): the
// same, with the ids reserved beforehand and the envelope.
var sealedIngestColumns = append(slices.Clip(ingestColumns), "id", "enc_key_id", "enc_dek", "enc_nonce", "enc_meta")

type summaryKey struct{ queue, status string }

type summaryDelta struct{ messages, bytes int64 }

// IngestBatch writes b in one transaction. It returns only after COMMIT
// succeeded; any error means the caller must not acknowledge the deliveries.
// When the error came from COMMIT itself the outcome is unknown: call
// BatchCommitted before trying again.
//
// Three steps, one transaction: sort the messages (a replayed message
// returning to its record, a redelivery of a stored row, or new), COPY the
// new ones, then register the batch and every counter it moved and commit.
func (s *Store) IngestBatch(ctx context.Context, b IngestBatch) (IngestResult, error) {
	enc, index, err := s.sealing(ctx)
	if err != nil {
		return IngestResult{}, fmt.Errorf("store: batch %d: %w", b.ID, err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return IngestResult{}, fmt.Errorf("store: begin ingest batch %d: %w", b.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	w := &ingestTx{
		s: s, tx: tx, b: &b, enc: enc, index: index,
		res:    IngestResult{Outcomes: make([]Outcome, len(b.Messages))},
		deltas: make(map[summaryKey]summaryDelta),
		groups: make(map[int64]*groupChange),
		plain:  make([]int, 0, len(b.Messages)),
	}
	if err := w.sortMessages(ctx); err != nil {
		return IngestResult{}, err
	}
	if err := w.copyNew(ctx); err != nil {
		return IngestResult{}, err
	}
	if err := w.register(ctx); err != nil {
		return IngestResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return IngestResult{}, fmt.Errorf("store: batch %d: commit: %w", b.ID, err)
	}
	res := w.res
	for _, o := range res.Outcomes {
		switch o {
		case OutcomeInserted:
			res.Inserted++
		case OutcomeDuplicate:
			res.Duplicates++
		case OutcomeReturned:
			res.Returned++
		}
	}
	return res, nil
}

// ingestTx is one IngestBatch's transaction and what its steps gather
// for the counters written at its end.
type ingestTx struct {
	s     *Store
	tx    pgx.Tx
	b     *IngestBatch
	enc   *encState
	index *crypt.Index
	res   IngestResult
	// Per source queue and status (summary), and per failure group
	// (groups.go).
	deltas map[summaryKey]summaryDelta
	groups map[int64]*groupChange
	// unclaimed counts, per replay task, the returned rows that were
	// being replayed for it (claimReturned). Nil until the batch holds a
	// replayed copy (sortMessages).
	unclaimed map[int64]int64
	// plain lists the messages (indexes into b.Messages) stored as new rows.
	plain []int
	// Plain rows returned to their records: their text documents
	// change. (A row sealed by its return loses its document to the
	// trigger of migration 00130.)
	returned []int64
}

// sortMessages settles each message that is not new: a replayed message
// whose record still exists returns to it, a redelivery of a row whose
// acknowledgement is unconfirmed is a duplicate. The rest go to plain.
func (w *ingestTx) sortMessages(ctx context.Context) error {
	b := w.b
	if err := w.lockReturnRows(ctx); err != nil {
		return err
	}
	for i := range b.Messages {
		m := &b.Messages[i]
		switch {
		case m.DLQID > 0:
			if w.unclaimed == nil {
				// Made on the first replayed copy: an ordinary batch
				// never returns a row, and allocates nothing for it.
				w.unclaimed = make(map[int64]int64)
			}
			out, err := returnToRecord(ctx, w.tx, m, w.deltas, w.groups, w.unclaimed, w.enc, w.index)
			if err != nil {
				return fmt.Errorf("store: batch %d: return message to record %d: %w", b.ID, m.DLQID, err)
			}
			if out == 0 {
				// No record to return to (deleted since, or another
				// body): stored as a new row, and so a redelivery of it
				// is matched like any other.
				if err := w.newOrRedelivered(ctx, i); err != nil {
					return err
				}
				continue
			}
			w.res.Outcomes[i] = out
			if out == OutcomeReturned && w.enc == nil {
				w.returned = append(w.returned, m.DLQID)
			}
		default:
			if err := w.newOrRedelivered(ctx, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// newOrRedelivered settles message i, which has no record to return to: a
// redelivery of a row of an unconfirmed batch is a duplicate, anything
// else goes to plain.
func (w *ingestTx) newOrRedelivered(ctx context.Context, i int) error {
	m := &w.b.Messages[i]
	if !m.Redelivered {
		w.plain = append(w.plain, i)
		return nil
	}
	dup, err := matchRedelivery(ctx, w.tx, keyedFingerprint(w.index, m.Fingerprint), m.Returns, w.b.ID)
	if err != nil {
		return fmt.Errorf("store: batch %d: match redelivery %x: %w", w.b.ID, m.Fingerprint, err)
	}
	if dup {
		w.res.Outcomes[i] = OutcomeDuplicate
	} else {
		w.plain = append(w.plain, i)
	}
	return nil
}

// copyNew stores the plain messages as new rows in one COPY, sealed when
// the store seals.
func (w *ingestTx) copyNew(ctx context.Context) error {
	b, plain := w.b, w.plain
	if len(plain) == 0 {
		return nil
	}
	groupIDs := make([]int64, len(plain))
	for k, i := range plain {
		groupIDs[k] = groupArrival(&b.Messages[i], w.groups, w.index)
	}
	// Sealed rows are bound to their ids, so those are reserved first.
	var sealed []sealedRow
	var ids []int64
	if w.enc != nil {
		var err error
		if ids, err = nextMessageIDs(ctx, w.tx, len(plain)); err != nil {
			return fmt.Errorf("store: batch %d: reserve %d ids: %w", b.ID, len(plain), err)
		}
		sealed = make([]sealedRow, len(plain))
		for k, i := range plain {
			if sealed[k], err = w.enc.sealMessage(w.index, ids[k], &b.Messages[i]); err != nil {
				return fmt.Errorf("store: batch %d: seal message: %w", b.ID, err)
			}
		}
	}
	cols := ingestColumns
	if sealed != nil {
		cols = sealedIngestColumns
	}
	// pgconn's sending goroutine may still read after a failed COPY
	// returns: the rows it reads are the batch's, which nothing changes.
	r := newCopyReader(len(plain), func(c *copyBuf, k int) error {
		m := &b.Messages[plain[k]]
		if sealed != nil {
			return copySealed(c, m, &sealed[k], w.index.Fingerprint(m.Fingerprint), b.ID, groupIDs[k], ids[k])
		}
		return w.s.copyPlain(c, m, b.ID, groupIDs[k])
	})
	if _, err := copyRows(ctx, w.tx, "dead_messages", cols, r); err != nil {
		return fmt.Errorf("store: batch %d: copy %d rows: %w", b.ID, len(plain), err)
	}
	for _, i := range plain {
		m := &b.Messages[i]
		w.res.Outcomes[i] = OutcomeInserted
		k := summaryKey{cleanText(m.SourceQueue), StatusPending}
		d := w.deltas[k]
		d.messages++
		d.bytes += int64(len(m.Body))
		w.deltas[k] = d
	}
	return nil
}

// register sends, in one round trip, the batch's entry in ingest_inflight
// (which a redelivery of its rows is matched against), the confirmed
// batches that leave it, the text index's entries for returned rows, and
// the summary, activity and failure group counters.
func (w *ingestTx) register(ctx context.Context) error {
	b := w.b
	var batch pgx.Batch
	batch.Queue(`INSERT INTO ingest_inflight (batch_id, consumer, rows) VALUES ($1, $2, $3)`,
		b.ID, b.Consumer, len(w.plain))
	if len(b.Confirmed) > 0 {
		batch.Queue(`DELETE FROM ingest_inflight WHERE batch_id = ANY($1)`, b.Confirmed)
	}
	switch {
	case len(w.returned) == 0:
	case w.s.text:
		// The text index's work is the indexer's (textindex.go): new
		// rows wait above its mark; returned ones, whose documents
		// change, are named in text_index_queue.
		queueReturnedText(&batch, w.returned)
	default:
		// Text search is off here, but a returned row may have a
		// document (written while it was on, or by an instance where it
		// is) that holds its old words; queued, it is written again by the
		// next indexer that runs. Left, the row kept its old words and
		// never got its new ones: it is below the mark, and
		// -backfill-text passes over rows that have a document.
		queueReturnedTextIndexed(&batch, w.returned)
	}
	claimReturned(&batch, w.unclaimed)
	queueSummaryDeltas(&batch, w.deltas)
	activity := make(map[activityKey]*activityDelta)
	ingestActivity(activity, b.Messages, w.res.Outcomes)
	queueActivityDeltas(&batch, activity)
	if err := queueGroupChanges(&batch, w.groups, w.enc); err != nil {
		return fmt.Errorf("store: batch %d: %w", b.ID, err)
	}
	if err := w.tx.SendBatch(ctx, &batch).Close(); err != nil {
		return fmt.Errorf("store: batch %d: register batch and summary: %w", b.ID, err)
	}
	return nil
}

// BatchCommitted reports whether batch id was committed by an earlier
// attempt whose outcome was unknown.
func (s *Store) BatchCommitted(ctx context.Context, id int64) (bool, error) {
	_, ok, err := s.CommittedRows(ctx, id)
	return ok, err
}

// CommittedRows reports whether batch id was committed by an earlier
// attempt whose outcome was unknown and, if so, how many new rows it
// wrote: its other messages were duplicates or returned to their records.
func (s *Store) CommittedRows(ctx context.Context, id int64) (rows int, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT rows FROM ingest_inflight WHERE batch_id = $1`, id).Scan(&rows)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("store: look up batch %d: %w", id, err)
	}
	return rows, true, nil
}

// ConfirmBatches removes batches whose acknowledgements are known to have
// reached the broker, so their rows no longer absorb redeliveries.
func (s *Store) ConfirmBatches(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM ingest_inflight WHERE batch_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("store: confirm %d batches: %w", len(ids), err)
	}
	return nil
}

// matchRedelivery decides whether a redelivered message is already stored:
// a row with its fingerprint from a batch whose acknowledgement is
// unconfirmed. If so, the row moves to the current batch and now stands for
// this delivery, whose own acknowledgement is again unconfirmed (if that ack
// is lost too, the next redelivery matches the row again). Within this
// transaction the row is no candidate, because the current batch joins
// ingest_inflight only after matching, so each row absorbs one delivery per
// batch.
//
// Identical messages (twins: same body, properties, headers and death
// second) share a fingerprint, and a redelivered twin that was never stored
// must not be taken for a stored one whose acknowledgement did reach the
// broker: that would lose it. Where the two cannot be told apart, storing
// wins, because an extra row can be deleted and a lost message cannot be
// found. So a delivery matches only when
//   - exactly one candidate exists (two or more mean twins are in flight),
//   - its row was stored from a delivery returned fewer times than this one
//     (returns only grow; unknown counts on either side do not decide), and
//   - no concurrent transaction holds the row (SKIP LOCKED): a message is
//     delivered to one consumer at a time, so two deliveries racing for one
//     row are twins. The lock is FOR NO KEY UPDATE (the update changes no
//     key), which the FOR KEY SHARE of an earlier version's text indexer
//     (during a rolling upgrade) does not stop: with FOR UPDATE, a
//     redelivery arriving while that indexer wrote the row's document
//     passed over the row and stored the message twice (found by
//     TestFaultKill9).
//
// For distinct messages this is exact. For twins it may store a redelivery
// again (a duplicate, never a loss); docs/ARCHITECTURE.md describes the one
// twin case it cannot detect.
func matchRedelivery(ctx context.Context, tx pgx.Tx, fingerprint int64, returns int, batch int64) (bool, error) {
	rows, err := tx.Query(ctx, `
SELECT m.id, m.ingest_batch, m.ingest_returns FROM ingest_inflight f
JOIN dead_messages m ON m.ingest_batch = f.batch_id AND m.fingerprint = $1
LIMIT 2`, planEachTime, fingerprint)
	if err != nil {
		return false, err
	}
	var id, from int64
	var rowReturns, n int
	for rows.Next() {
		n++
		if err := rows.Scan(&id, &from, &rowReturns); err != nil {
			rows.Close()
			return false, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	if n != 1 {
		return false, nil
	}
	if returns != ReturnsUnknown && rowReturns != ReturnsUnknown && rowReturns >= returns {
		return false, nil
	}
	tag, err := tx.Exec(ctx, `
UPDATE dead_messages SET ingest_batch = $3, ingest_returns = $4
WHERE id = (SELECT id FROM dead_messages WHERE id = $1 AND ingest_batch = $2 FOR NO KEY UPDATE SKIP LOCKED)`,
		planEachTime, id, from, batch, returns)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// keyedFingerprint is the fingerprint a row stores: keyed when the store
// seals (index set).
func keyedFingerprint(index *crypt.Index, fp int64) int64 {
	if index == nil {
		return fp
	}
	return index.Fingerprint(fp)
}

// queueSummaryDeltas adds one upsert applying deltas to queue_summary. Keys
// are sorted so that concurrent transactions lock summary rows in the same
// order and cannot deadlock.
func queueSummaryDeltas(b *pgx.Batch, deltas map[summaryKey]summaryDelta) {
	keys := make([]summaryKey, 0, len(deltas))
	for k, d := range deltas {
		if d.messages != 0 || d.bytes != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.SortFunc(keys, func(a, b summaryKey) int {
		return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.status, b.status))
	})
	queues := make([]string, len(keys))
	statuses := make([]string, len(keys))
	msgs := make([]int64, len(keys))
	bytes := make([]int64, len(keys))
	for i, k := range keys {
		queues[i], statuses[i] = k.queue, k.status
		msgs[i], bytes[i] = deltas[k].messages, deltas[k].bytes
	}
	b.Queue(`
INSERT INTO queue_summary AS s (source_queue, status, messages, bytes)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
ON CONFLICT (source_queue, status) DO UPDATE SET
    messages = s.messages + EXCLUDED.messages,
    bytes = s.bytes + EXCLUDED.bytes,
    updated_at = now()`, queues, statuses, msgs, bytes)
}

func nullJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
