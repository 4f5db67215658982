package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/dlq/dlq/crypt"
)

// A replayed message that dies again carries x-dlq-id: ingest returns it
// to the row it was replayed from, with its new death, instead of storing
// it a second time.

// lockReturnRowsSQL locks the rows $1 the way lockReturnRow does, in id
// order: PostgreSQL locks rows as they come out of the ORDER BY.
const lockReturnRowsSQL = `SELECT id FROM dead_messages WHERE id = ANY($1) ORDER BY id FOR UPDATE`

// lockReturnRows locks, all at once and in id order, the rows the batch's
// replayed copies return to, before sortMessages works through them in
// the batch's order (lockReturnRow's lock then finds each row held
// already). Settlements, acknowledgements and deletes lock those rows in
// id order (store/doc.go, "Lock order"); taken one at a time in arrival
// order, two copies arriving in descending id order deadlocked with them.
// One copy alone needs it too when the batch holds a redelivery: the
// redelivery's match (matchRedelivery) keeps the row it moves locked, and
// a copy returning after it to a lower id waited for its row while holding
// that one. A batch with no copy, or one copy and no redelivery, has no
// order to get wrong and pays nothing: no statement, no allocation.
func (w *ingestTx) lockReturnRows(ctx context.Context) error {
	n, redelivered := 0, false
	for i := range w.b.Messages {
		if w.b.Messages[i].DLQID > 0 {
			n++
		}
		redelivered = redelivered || w.b.Messages[i].Redelivered
	}
	if n == 0 || (n == 1 && !redelivered) {
		return nil
	}
	ids := make([]int64, 0, n)
	for i := range w.b.Messages {
		if id := w.b.Messages[i].DLQID; id > 0 {
			ids = append(ids, id)
		}
	}
	if _, err := w.tx.Exec(ctx, lockReturnRowsSQL, ids); err != nil {
		return fmt.Errorf("store: batch %d: lock the rows its %d replayed messages return to: %w", w.b.ID, n, err)
	}
	return nil
}

// returnToRecord applies a replayed message's new death to its row. It
// returns 0 when there is no such row (deleted since, or an x-dlq-id from
// elsewhere whose body differs), in which case the caller inserts a new one.
// A sealed row's body is compared without being read (RowKey.Matches), and
// the row is sealed again under a new data key with its new death; a row
// sealed while this store has no keys is never taken for the same body.
// A row being replayed leaves its claim: unclaimed counts it for its task
// (claimReturned).
func returnToRecord(ctx context.Context, tx pgx.Tx, m *NewMessage, deltas map[summaryKey]summaryDelta, groups map[int64]*groupChange,
	unclaimed map[int64]int64, enc *encState, index *crypt.Index) (Outcome, error) {
	row, same, err := lockReturnRow(ctx, tx, m, enc)
	if err != nil || !same {
		return 0, err
	}
	// The redelivery of a death this row already took changes nothing. A
	// first delivery with the same replay id is another death of the same
	// publish (routed to two queues that both dead-letter it, or
	// dead-lettered twice by the broker): it returns too, and the death it
	// replaces goes to the history, so none is dropped.
	if m.Redelivered && m.ReplayID != "" && row.lastReplayID != nil && *row.lastReplayID == m.ReplayID {
		return OutcomeDuplicate, nil
	}
	// The row keeps its source queue; its failure group follows the new death.
	arrival := *m
	arrival.SourceQueue = row.queue
	newGroup := groupArrival(&arrival, groups, index)
	if row.oldGroup != nil {
		groupMove(groups, *row.oldGroup, row.status, "", 1)
	}
	var cleared bool
	if enc != nil {
		cleared, err = updateReturnedSealed(ctx, tx, m, enc, index, newGroup)
	} else {
		cleared, err = updateReturned(ctx, tx, m, newGroup)
	}
	if err != nil {
		return 0, err
	}
	if err := keepDeathRecord(ctx, tx, m, cleared); err != nil {
		return 0, err
	}
	if row.status == StatusReplaying && row.taskID != nil {
		unclaimed[*row.taskID]++
	}
	old := summaryKey{row.queue, row.status}
	d := deltas[old]
	d.messages--
	d.bytes -= row.size
	deltas[old] = d
	cur := summaryKey{row.queue, StatusPending}
	d = deltas[cur]
	d.messages++
	d.bytes += row.size
	deltas[cur] = d
	return OutcomeReturned, nil
}

// returnRow is what a returning message changes in the row it returns to
// besides the death.
type returnRow struct {
	status, queue string
	size          int64
	taskID        *int64 // the task whose claim took the row last
	lastReplayID  *string
	oldGroup      *int64
}

// lockReturnRow locks the row m's x-dlq-id names and reads it; same is
// false when there is none or its body is not m's. A sealed body is
// compared under its data key, unwrapped when this store has keys. In a
// batch of two or more replayed copies the row is locked already, with
// the others in id order (lockReturnRows): this lock waits for nothing.
func lockReturnRow(ctx context.Context, tx pgx.Tx, m *NewMessage, enc *encState) (row returnRow, same bool, err error) {
	var (
		sameBody   *bool
		env        crypt.Envelope
		keyID      *string
		sealedBody []byte
	)
	err = tx.QueryRow(ctx, `
SELECT status, source_queue, body_size, last_death_replay_id, CASE WHEN enc_key_id IS NULL THEN body = $2 END, group_id,
    enc_key_id, enc_dek, enc_nonce, CASE WHEN enc_key_id IS NOT NULL THEN body END, replay_task_id
FROM dead_messages WHERE id = $1 FOR UPDATE`, planEachTime, m.DLQID, nonNilBytes(m.Body)).
		Scan(&row.status, &row.queue, &row.size, &row.lastReplayID, &sameBody, &row.oldGroup, &keyID, &env.DEK, &env.Nonce, &sealedBody, &row.taskID)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false, nil
	}
	if err != nil {
		return row, false, err
	}
	same = sameBody != nil && *sameBody
	if keyID != nil {
		env.KeyID = *keyID
		if enc != nil {
			if k, err := enc.ring.Unwrap(env); err == nil {
				same = k.Matches(MessageRef(m.DLQID), crypt.FieldBody, sealedBody, nonNilBytes(m.Body))
			}
		}
	}
	return row, same, nil
}

// returnedSet is the SET list of a returning message's update, besides
// the columns that sealing changes.
const returnedSet = `
    status = 'pending', reason = $2, death_count = $3, failure = $4, failure_type = $5,
    failure_message = $6, properties = $7, headers = $8, failed_at = $9,
    dead_letter_queue = $10, last_death_replay_id = $11,
    replay_count = GREATEST(replay_count, $12), status_changed_at = now(),
    claim_owner = NULL, claim_expires_at = NULL, group_id = $13, search_keys = $14,
    search_hashes = $15, death_history = ` + appendDeathHistory + `, x_death = $17, category = $18`

// updateReturnedSealed writes m's new death into its row sealed under a
// new data key. cleared reports x_death NULL after the update (the
// trigger's doing: keepDeathRecord).
func updateReturnedSealed(ctx context.Context, tx pgx.Tx, m *NewMessage, enc *encState, index *crypt.Index, group int64) (cleared bool, err error) {
	r, err := enc.sealMessage(index, m.DLQID, m)
	if err != nil {
		return false, err
	}
	err = tx.QueryRow(ctx, `UPDATE dead_messages SET`+returnedSet+`,
    message_id = NULL, body = $19, enc_key_id = $20, enc_dek = $21, enc_nonce = $22, enc_meta = $23,
    search_text = NULL, body_text_bytes = NULL
WHERE id = $1 RETURNING x_death IS NULL`, planEachTime,
		m.DLQID, cleanText(m.Reason), m.DeathCount, nil, nullText(m.FailureType),
		nil, emptyObject, r.headers, m.FailedAt, cleanText(m.DeadLetterQueue),
		nullText(m.ReplayID), m.ReplayCount, group, nil, r.hashes, DeathHistoryMax, nullJSON(m.XDeath),
		categoryOf(m.Category), r.body, r.env.KeyID, r.env.DEK, r.env.Nonce, r.meta).Scan(&cleared)
	return cleared, err
}

// updateReturned writes m's new death into its row in the clear. cleared
// is as for updateReturnedSealed.
func updateReturned(ctx context.Context, tx pgx.Tx, m *NewMessage, group int64) (cleared bool, err error) {
	keys := SearchKeys(m)
	// The body stays, and so does what of it is text (body_text_bytes);
	// the header values are the new death's, which the indexer reads from
	// the row (the caller queues it again).
	err = tx.QueryRow(ctx, `UPDATE dead_messages SET`+returnedSet+`, search_text = NULL
WHERE id = $1 RETURNING x_death IS NULL`, planEachTime,
		m.DLQID, cleanText(m.Reason), m.DeathCount, nullJSON(m.Failure), nullText(m.FailureType),
		nullText(m.FailureMessage), m.Properties, m.storedHeaders(), m.FailedAt, cleanText(m.DeadLetterQueue),
		nullText(m.ReplayID), m.ReplayCount, group, keys, KeyHashes(keys), DeathHistoryMax, nullJSON(m.XDeath),
		categoryOf(m.Category)).Scan(&cleared)
	return cleared, err
}

// claimReturned takes the rows returned out of replaying (unclaimed, per
// task) out of their tasks' claimed counts, as claim recovery does
// (recountTakenTasks): the claim that held each lost it, and its holder's
// release of it is fenced off, while the item stays to be claimed again.
// An outcome its holder records for the item (a confirm, a nack) counts it
// back in (settleItemsSQL). Queued on the batch that ends the ingest
// transaction: replay_tasks after the rows and before the counters, in id
// order (lockReplayTasksSQL), the lock order of store/doc.go.
func claimReturned(b *pgx.Batch, unclaimed map[int64]int64) {
	if len(unclaimed) == 0 {
		return
	}
	ids := slices.Sorted(maps.Keys(unclaimed))
	counts := make([]int64, len(ids))
	for i, id := range ids {
		counts[i] = unclaimed[id]
	}
	b.Queue(lockReplayTasksSQL, ids)
	b.Queue(`
UPDATE replay_tasks t SET claimed = t.claimed - c.n, updated_at = now()
FROM unnest($1::bigint[], $2::bigint[]) AS c(id, n) WHERE t.id = c.id`, ids, counts)
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

// keepDeathRecord writes m's death record again when the update of its
// row left x_death NULL (cleared). Migration 00080's trigger clears a
// death record that an UPDATE of failed_at leaves textually unchanged: it
// takes the writer for an older dlq, which replaces the death but knows
// nothing of x_death. This version wrote the new death's own record, equal
// to the one before (the same hops in the same second, after a replay),
// and the headers no longer hold x-death to derive it from. Written again
// without failed_at, which the trigger does not watch.
func keepDeathRecord(ctx context.Context, tx pgx.Tx, m *NewMessage, cleared bool) error {
	if !cleared || len(m.XDeath) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE dead_messages SET x_death = $2 WHERE id = $1`, m.DLQID, nullJSON(m.XDeath)); err != nil {
		return fmt.Errorf("store: keep the death record of message %d: %w", m.DLQID, err)
	}
	return nil
}
