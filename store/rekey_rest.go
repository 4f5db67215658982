package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RekeyRest re-encrypts, under lease l, what is sealed outside
// dead_messages (edits waiting in replay tasks, failure groups' text, the
// index key) and seals what of it is plain. These tables are small: one
// transaction. It locks in the lock order of store/doc.go: the tasks, then
// the groups, each in id order, as settlements, claims, claim recovery and
// ingest do (a task's counters, then the groups' in applyStatusDeltas).
// Groups first, a settlement that held its task and waited for a group
// and this, holding the group and waiting for the task, deadlocked.
func (s *Store) RekeyRest(ctx context.Context, l Lease) (n int, skipped []RekeySkip, err error) {
	enc, _, err := s.sealing(ctx)
	if err != nil {
		return 0, nil, err
	}
	if enc == nil {
		return 0, nil, errors.New("store: rekey needs encryption keys")
	}
	err = s.fenced(ctx, l, func(tx pgx.Tx) error {
		r := rekeyRest{enc: enc}
		for _, step := range []func(context.Context, pgx.Tx) error{r.edits, r.groups, r.indexKey} {
			if err := step(ctx, tx); err != nil {
				return err
			}
		}
		n, skipped = r.n, r.skipped
		if r.b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, &r.b).Close()
	})
	if err != nil {
		return 0, nil, fmt.Errorf("store: rekey failure groups, edits and the index key: %w", err)
	}
	return n, skipped, nil
}

// rekeyRest is one RekeyRest transaction: its steps queue their writes
// into b, count them in n, and list in skipped what they cannot
// re-encrypt.
type rekeyRest struct {
	enc     *encState
	b       pgx.Batch
	n       int
	skipped []RekeySkip
}

// groups re-wraps the failure groups' sealed text and seals the plain.
func (r *rekeyRest) groups(ctx context.Context, tx pgx.Tx) error {
	ring := r.enc.ring
	rows, err := tx.Query(ctx, `
SELECT id, enc_text, pattern, sample_message FROM failure_groups
WHERE enc_key_id IS DISTINCT FROM $1 AND (enc_key_id IS NOT NULL OR pattern <> '' OR sample_message <> '')
ORDER BY id FOR UPDATE`, ring.Active())
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			id              int64
			text            []byte
			pattern, sample string
		)
		if err := rows.Scan(&id, &text, &pattern, &sample); err != nil {
			rows.Close()
			return err
		}
		if text != nil {
			text, err = ring.RewrapBlob(text)
		} else {
			text, err = r.enc.sealGroupText(id, pattern, sample)
		}
		if err != nil {
			r.skipped = append(r.skipped, RekeySkip{Table: tableGroups, ID: id, Err: err})
			continue
		}
		r.b.Queue(`UPDATE failure_groups SET enc_key_id = $2, enc_text = $3, pattern = '', sample_message = '' WHERE id = $1`, id, ring.Active(), text)
		r.n++
	}
	rows.Close()
	return rows.Err()
}

// edits re-wraps the sealed edits waiting in replay tasks and seals the
// plain.
func (r *rekeyRest) edits(ctx context.Context, tx pgx.Tx) error {
	ring := r.enc.ring
	rows, err := tx.Query(ctx, `
SELECT id, edit::text FROM replay_tasks
WHERE edit IS NOT NULL AND coalesce(edit->>'key_id', '') <> $1
ORDER BY id FOR UPDATE`, ring.Active())
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			id   int64
			edit string
		)
		if err := rows.Scan(&id, &edit); err != nil {
			rows.Close()
			return err
		}
		var out []byte
		if blob, ok := SealedEdit(json.RawMessage(edit)); ok {
			blob, err = ring.RewrapBlob(blob)
			if err == nil {
				out, err = json.Marshal(sealedEdit{KeyID: ring.Active(), Sealed: blob})
			}
		} else {
			out, err = r.enc.sealEdit(id, []byte(edit))
		}
		if err != nil {
			r.skipped = append(r.skipped, RekeySkip{Table: tableTasks, ID: id, Err: err})
			continue
		}
		r.b.Queue(`UPDATE replay_tasks SET edit = $2 WHERE id = $1`, id, out)
		r.n++
	}
	rows.Close()
	return rows.Err()
}

// indexKey re-wraps the index key, when there is one and another key
// wraps it.
func (r *rekeyRest) indexKey(ctx context.Context, tx pgx.Tx) error {
	ring := r.enc.ring
	var keyID string
	var wrapped []byte
	err := tx.QueryRow(ctx, `SELECT key_id, wrapped FROM encryption_index FOR UPDATE`).Scan(&keyID, &wrapped)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	case keyID != ring.Active():
		id, w, err := ring.RewrapIndex(keyID, wrapped)
		if err != nil {
			r.skipped = append(r.skipped, RekeySkip{Table: "encryption_index", Err: err})
			break
		}
		r.b.Queue(`UPDATE encryption_index SET key_id = $1, wrapped = $2, rewrapped_at = now()`, id, w)
		r.n++
	}
	return nil
}
