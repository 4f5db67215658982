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
func (s *Store) IngestBatch(ctx context.Context, b IngestBatch) (IngestResult, error) {
	res := IngestResult{Outcomes: make([]Outcome, len(b.Messages))}
	enc, index, err := s.sealing(ctx)
	if err != nil {
		return IngestResult{}, fmt.Errorf("store: batch %d: %w", b.ID, err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return IngestResult{}, fmt.Errorf("store: begin ingest batch %d: %w", b.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	deltas := make(map[summaryKey]summaryDelta)
	// Failure group and hourly activity counters (groups.go, deltas.go).
	groups := make(map[int64]*groupChange)
	activity := make(map[activityKey]*activityDelta)
	plain := make([]int, 0, len(b.Messages))
	// Rows returned to record: a plain one's document changes; one sealed
	// now (the store seals) may have had a document while it was plain.
	var returned, resealed []int64
	for i := range b.Messages {
		m := &b.Messages[i]
		switch {
		case m.DLQID > 0:
			out, err := returnToRecord(ctx, tx, m, deltas, groups, enc, index)
			if err != nil {
				return IngestResult{}, fmt.Errorf("store: batch %d: return message to record %d: %w", b.ID, m.DLQID, err)
			}
			if out == 0 {
				plain = append(plain, i)
				continue
			}
			res.Outcomes[i] = out
			switch {
			case out == OutcomeReturned && enc == nil:
				returned = append(returned, m.DLQID)
			case out == OutcomeReturned:
				resealed = append(resealed, m.DLQID)
			}
		case m.Redelivered:
			dup, err := matchRedelivery(ctx, tx, keyedFingerprint(index, m.Fingerprint), m.Returns, b.ID)
			if err != nil {
				return IngestResult{}, fmt.Errorf("store: batch %d: match redelivery %x: %w", b.ID, m.Fingerprint, err)
			}
			if !dup {
				plain = append(plain, i)
				continue
			}
			res.Outcomes[i] = OutcomeDuplicate
		default:
			plain = append(plain, i)
		}
	}

	if len(plain) > 0 {
		groupIDs := make([]int64, len(plain))
		for k, i := range plain {
			groupIDs[k] = groupArrival(&b.Messages[i], groups, index)
		}
		// Sealed rows are bound to their ids, so those are reserved first.
		var sealed []sealedRow
		var ids []int64
		if enc != nil {
			if ids, err = nextMessageIDs(ctx, tx, len(plain)); err != nil {
				return IngestResult{}, fmt.Errorf("store: batch %d: reserve %d ids: %w", b.ID, len(plain), err)
			}
			sealed = make([]sealedRow, len(plain))
			for k, i := range plain {
				if sealed[k], err = enc.sealMessage(index, ids[k], &b.Messages[i]); err != nil {
					return IngestResult{}, fmt.Errorf("store: batch %d: seal message: %w", b.ID, err)
				}
			}
		}
		cols := ingestColumns
		if sealed != nil {
			cols = sealedIngestColumns
		}
		// pgconn's sending goroutine may still read after a failed COPY
		// returns: the rows it reads are the batch's, which nothing
		// changes.
		r := newCopyReader(len(plain), func(c *copyBuf, k int) error {
			m := &b.Messages[plain[k]]
			if sealed != nil {
				return copySealed(c, m, &sealed[k], index.Fingerprint(m.Fingerprint), b.ID, groupIDs[k], ids[k])
			}
			return s.copyPlain(c, m, b.ID, groupIDs[k])
		})
		if _, err := copyRows(ctx, tx, "dead_messages", cols, r); err != nil {
			return IngestResult{}, fmt.Errorf("store: batch %d: copy %d rows: %w", b.ID, len(plain), err)
		}
		for _, i := range plain {
			m := &b.Messages[i]
			res.Outcomes[i] = OutcomeInserted
			k := summaryKey{cleanText(m.SourceQueue), StatusPending}
			d := deltas[k]
			d.messages++
			d.bytes += int64(len(m.Body))
			deltas[k] = d
		}
	}

	var batch pgx.Batch
	batch.Queue(`INSERT INTO ingest_inflight (batch_id, consumer, rows) VALUES ($1, $2, $3)`,
		b.ID, b.Consumer, len(plain))
	if len(b.Confirmed) > 0 {
		batch.Queue(`DELETE FROM ingest_inflight WHERE batch_id = ANY($1)`, b.Confirmed)
	}
	if s.text && len(returned) > 0 {
		// The text index's work is the indexer's (textindex.go): new
		// rows wait above its mark; returned ones, whose documents
		// change, are named in text_index_queue.
		queueReturnedText(&batch, returned)
	}
	if len(resealed) > 0 {
		batch.Queue(`DELETE FROM message_text WHERE id = ANY($1)`, resealed)
	}
	queueSummaryDeltas(&batch, deltas)
	ingestActivity(activity, b.Messages, res.Outcomes)
	queueActivityDeltas(&batch, activity)
	if err := queueGroupChanges(&batch, groups, enc); err != nil {
		return IngestResult{}, fmt.Errorf("store: batch %d: %w", b.ID, err)
	}
	if err := tx.SendBatch(ctx, &batch).Close(); err != nil {
		return IngestResult{}, fmt.Errorf("store: batch %d: register batch and summary: %w", b.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return IngestResult{}, fmt.Errorf("store: batch %d: commit: %w", b.ID, err)
	}
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
//     key), which the text indexer's FOR KEY SHARE does not stop: with FOR
//     UPDATE, a redelivery arriving while the indexer wrote the row's
//     document passed over the row and stored the message twice (found by
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

// returnToRecord applies a replayed message's new death to its row. It
// returns 0 when there is no such row (deleted since, or an x-dlq-id from
// elsewhere whose body differs), in which case the caller inserts a new one.
// A sealed row's body is compared without being read (RowKey.Matches), and
// the row is sealed again under a new data key with its new death; a row
// sealed while this store has no keys is never taken for the same body.
func returnToRecord(ctx context.Context, tx pgx.Tx, m *NewMessage, deltas map[summaryKey]summaryDelta, groups map[int64]*groupChange,
	enc *encState, index *crypt.Index) (Outcome, error) {
	var (
		status, queue string
		size          int64
		lastReplayID  *string
		sameBody      *bool
		oldGroup      *int64
		env           crypt.Envelope
		keyID         *string
		sealedBody    []byte
	)
	err := tx.QueryRow(ctx, `
SELECT status, source_queue, body_size, last_death_replay_id, CASE WHEN enc_key_id IS NULL THEN body = $2 END, group_id,
    enc_key_id, enc_dek, enc_nonce, CASE WHEN enc_key_id IS NOT NULL THEN body END
FROM dead_messages WHERE id = $1 FOR UPDATE`, planEachTime, m.DLQID, nonNilBytes(m.Body)).
		Scan(&status, &queue, &size, &lastReplayID, &sameBody, &oldGroup, &keyID, &env.DEK, &env.Nonce, &sealedBody)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	same := sameBody != nil && *sameBody
	if keyID != nil {
		env.KeyID = *keyID
		if enc != nil {
			if k, err := enc.ring.Unwrap(env); err == nil {
				same = k.Matches(MessageRef(m.DLQID), crypt.FieldBody, sealedBody, nonNilBytes(m.Body))
			}
		}
	}
	if !same {
		return 0, nil
	}
	if m.ReplayID != "" && lastReplayID != nil && *lastReplayID == m.ReplayID {
		return OutcomeDuplicate, nil
	}
	// The row keeps its source queue; its failure group follows the new death.
	arrival := *m
	arrival.SourceQueue = queue
	newGroup := groupArrival(&arrival, groups, index)
	if oldGroup != nil {
		groupMove(groups, *oldGroup, status, "", 1)
	}
	const set = `
    status = 'pending', reason = $2, death_count = $3, failure = $4, failure_type = $5,
    failure_message = $6, properties = $7, headers = $8, failed_at = $9,
    dead_letter_queue = $10, last_death_replay_id = $11,
    replay_count = GREATEST(replay_count, $12), status_changed_at = now(),
    claim_owner = NULL, claim_expires_at = NULL, group_id = $13, search_keys = $14,
    search_hashes = $15, death_history = ` + appendDeathHistory + `, x_death = $17, category = $18`
	if enc != nil {
		r, err := enc.sealMessage(index, m.DLQID, m)
		if err != nil {
			return 0, err
		}
		_, err = tx.Exec(ctx, `UPDATE dead_messages SET`+set+`,
    message_id = NULL, body = $19, enc_key_id = $20, enc_dek = $21, enc_nonce = $22, enc_meta = $23,
    search_text = NULL, body_text_bytes = NULL
WHERE id = $1`, planEachTime,
			m.DLQID, cleanText(m.Reason), m.DeathCount, nil, nullText(m.FailureType),
			nil, emptyObject, r.headers, m.FailedAt, cleanText(m.DeadLetterQueue),
			nullText(m.ReplayID), m.ReplayCount, newGroup, nil, r.hashes, DeathHistoryMax, nullJSON(m.XDeath),
			categoryOf(m.Category), r.body, r.env.KeyID, r.env.DEK, r.env.Nonce, r.meta)
		if err != nil {
			return 0, err
		}
	} else {
		keys := SearchKeys(m)
		// The body stays, and so does what of it is text
		// (body_text_bytes); the header values are the new death's, which
		// the indexer reads from the row (the caller queues it again).
		_, err = tx.Exec(ctx, `UPDATE dead_messages SET`+set+`, search_text = NULL
WHERE id = $1`, planEachTime,
			m.DLQID, cleanText(m.Reason), m.DeathCount, nullJSON(m.Failure), nullText(m.FailureType),
			nullText(m.FailureMessage), m.Properties, m.storedHeaders(), m.FailedAt, cleanText(m.DeadLetterQueue),
			nullText(m.ReplayID), m.ReplayCount, newGroup, keys, KeyHashes(keys), DeathHistoryMax, nullJSON(m.XDeath),
			categoryOf(m.Category))
		if err != nil {
			return 0, err
		}
	}
	old := summaryKey{queue, status}
	d := deltas[old]
	d.messages--
	d.bytes -= size
	deltas[old] = d
	cur := summaryKey{queue, StatusPending}
	d = deltas[cur]
	d.messages++
	d.bytes += size
	deltas[cur] = d
	return OutcomeReturned, nil
}

// keyedFingerprint is the fingerprint a row stores: keyed when the store
// seals (index set).
func keyedFingerprint(index *crypt.Index, fp int64) int64 {
	if index == nil {
		return fp
	}
	return index.Fingerprint(fp)
}

// DeathHistoryMax bounds dead_messages.death_history: a message that keeps
// failing keeps its latest deaths, not an ever-growing row.
const DeathHistoryMax = 50

// appendDeathHistory is the new death_history of a row whose death is being
// replaced ($16 is DeathHistoryMax): the old one with the replaced death
// appended, oldest dropped beyond the bound. In an UPDATE's SET list the
// columns still hold the row's old values, which is the death to keep.
// failed_at is written in UTC, as the API writes times. x_death keeps the
// replaced death's hops (the queues it died in, with their reasons and
// counts): null for a row stored before ingest wrote the column, whose
// hops are then not known.
const appendDeathHistory = `(
    SELECT jsonb_agg(h.e ORDER BY h.i)
    FROM jsonb_array_elements(coalesce(death_history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'failed_at', to_char(failed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'reason', reason, 'death_count', death_count, 'dead_letter_queue', dead_letter_queue,
        'failure_type', failure_type, 'failure_message', left(failure_message, 1000),
        'x_death', x_death
    ))) WITH ORDINALITY AS h(e, i)
    WHERE h.i > jsonb_array_length(coalesce(death_history, '[]'::jsonb)) + 1 - $16)`

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
