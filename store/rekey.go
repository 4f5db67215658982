package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlq/dlq/crypt"
)

// Keys and rotation (docs/SECURITY.md). encryption_keys_used lists every
// key that ever wrapped something, so that a start can tell, without
// scanning dead_messages, whether a key missing from the configuration
// may still be needed; only then does it count.

// KeyUse is what one key-encryption key wraps.
type KeyUse struct {
	// KeyID is "" for what is stored in plain text.
	KeyID    string `json:"key_id"`
	Messages int64  `json:"messages"`
	Groups   int64  `json:"groups"`
	Edits    int64  `json:"edits"`
	Index    bool   `json:"index,omitempty"`
}

// Used reports whether anything still depends on the key.
func (u KeyUse) Used() bool { return u.Messages+u.Groups+u.Edits > 0 || u.Index }

func (u KeyUse) String() string {
	parts := []string{fmt.Sprintf("%d messages", u.Messages), fmt.Sprintf("%d failure groups", u.Groups), fmt.Sprintf("%d edits", u.Edits)}
	if u.Index {
		parts = append(parts, "the index key")
	}
	return strings.Join(parts, ", ")
}

// MissingKeysError refuses a start without keys that still wrap data.
type MissingKeysError struct{ Uses []KeyUse }

func (e *MissingKeysError) Error() string {
	var b strings.Builder
	for i, u := range e.Uses {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "encryption key %s still wraps %s", u.KeyID, u)
	}
	b.WriteString(", but is not configured (DLQ_ENCRYPTION_KEYS): put it back, run `dlq rekey` to re-encrypt everything under the first key, " +
		"then remove it (or, if the key is lost for good, set encryption.allow_missing_keys to start anyway: those rows stay unreadable and are flagged)")
	return b.String()
}

// CheckKeys refuses (*MissingKeysError) when a key that wrapped something
// here is not among configured and still wraps data, with the counts. A
// missing key that wraps nothing any more is forgotten. The counting
// scans dead_messages once, and only when a registered key is missing.
func (s *Store) CheckKeys(ctx context.Context, configured []string) error {
	if configured == nil {
		configured = []string{}
	}
	rows, err := s.pool.Query(ctx, `SELECT key_id FROM encryption_keys_used WHERE NOT (key_id = ANY($1)) ORDER BY key_id`, configured)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		// The schema is not migrated yet (dlq serve --no-migrate before
		// dlq migrate): no row is sealed, so no key is in use.
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: check encryption keys: %w", err)
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("store: check encryption keys: %w", err)
	}
	if len(missing) == 0 {
		return nil
	}
	s.log.Info("encryption keys used here are not configured: counting what they still wrap (one scan of dead_messages)", "keys", missing)
	uses, err := s.keyUses(ctx, missing)
	if err != nil {
		return err
	}
	var used []KeyUse
	for _, u := range uses {
		if u.Used() {
			used = append(used, u)
			continue
		}
		if _, err := s.pool.Exec(ctx, `DELETE FROM encryption_keys_used WHERE key_id = $1`, u.KeyID); err != nil {
			return fmt.Errorf("store: forget encryption key %s: %w", u.KeyID, err)
		}
		s.log.Info("encryption key no longer wraps anything: forgotten", "key_id", u.KeyID)
	}
	if len(used) > 0 {
		return &MissingKeysError{Uses: used}
	}
	return nil
}

// KeyUsage counts what every key wraps, and what is plain (KeyID ""), in
// one scan of each table.
func (s *Store) KeyUsage(ctx context.Context) ([]KeyUse, error) {
	return s.keyUses(ctx, nil)
}

// keyUses counts the use of keys (nil: every key, and plain data).
func (s *Store) keyUses(ctx context.Context, keys []string) ([]KeyUse, error) {
	byKey := map[string]*KeyUse{}
	var order []string
	use := func(k string) *KeyUse {
		u := byKey[k]
		if u == nil {
			u = &KeyUse{KeyID: k}
			byKey[k] = u
			order = append(order, k)
		}
		return u
	}
	for _, k := range keys {
		use(k)
	}
	count := func(sql string, add func(u *KeyUse, n int64)) error {
		rows, err := s.pool.Query(ctx, sql, keys)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				return err
			}
			add(use(k), n)
		}
		return rows.Err()
	}
	const inKeys = `($1::text[] IS NULL OR k = ANY($1))`
	err := errors.Join(
		count(`SELECT k, count(*) FROM (SELECT coalesce(enc_key_id, '') AS k FROM dead_messages) x WHERE `+inKeys+` GROUP BY k`,
			func(u *KeyUse, n int64) { u.Messages += n }),
		count(`SELECT k, count(*) FROM (SELECT coalesce(enc_key_id, '') AS k FROM failure_groups
    WHERE enc_key_id IS NOT NULL OR pattern <> '' OR sample_message <> '') x WHERE `+inKeys+` GROUP BY k`,
			func(u *KeyUse, n int64) { u.Groups += n }),
		count(`SELECT k, count(*) FROM (SELECT coalesce(edit->>'key_id', '') AS k FROM replay_tasks WHERE edit IS NOT NULL) x
    WHERE `+inKeys+` GROUP BY k`,
			func(u *KeyUse, n int64) { u.Edits += n }),
		count(`SELECT k, 1 FROM (SELECT key_id AS k FROM encryption_index) x WHERE `+inKeys,
			func(u *KeyUse, _ int64) { u.Index = true }),
	)
	if err != nil {
		return nil, fmt.Errorf("store: count what encryption keys wrap: %w", err)
	}
	out := make([]KeyUse, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out, nil
}

// MessagesUnderKey lists, in id order after after, at most limit ids of
// messages sealed under key: those a missing key leaves unreadable.
func (s *Store) MessagesUnderKey(ctx context.Context, key string, after int64, limit int) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM dead_messages WHERE enc_key_id = $1 AND id > $2 ORDER BY id LIMIT $3`, key, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: messages under key %s: %w", key, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("store: messages under key %s: %w", key, err)
	}
	return ids, nil
}

// RekeySkip is a row Rekey could not re-encrypt, and why.
type RekeySkip struct {
	Table string
	ID    int64
	Err   error
}

// RekeyResult is what one RekeyMessages batch did.
type RekeyResult struct {
	// Rewrapped rows had their data key wrapped again under the active
	// key; Sealed rows were plain and are sealed now.
	Rewrapped, Sealed int
	// Skipped rows cannot be re-encrypted: their key is missing, or they
	// do not authenticate. They stay as they are and are listed.
	Skipped []RekeySkip
	// Last is the highest id looked at: the next batch starts after it.
	Last int64
	// Done is true when no row after the cursor needed anything.
	Done bool
}

// RekeyMessages re-encrypts, under lease l (a fenced write: package
// cron), at most limit messages after the id after that are not under
// the active key: a sealed row gets its data key re-wrapped (its
// ciphertexts are not touched), a plain row is sealed. Rows another
// transaction holds are passed over (SKIP LOCKED); a later pass finds
// them. The batch commits as a whole, so a process killed at any point
// loses nothing and resumes from the rows' own state.
func (s *Store) RekeyMessages(ctx context.Context, l Lease, after int64, limit int) (RekeyResult, error) {
	enc, index, err := s.sealing(ctx)
	if err != nil {
		return RekeyResult{}, err
	}
	if enc == nil {
		return RekeyResult{}, errors.New("store: rekey needs encryption keys")
	}
	var res RekeyResult
	err = s.fenced(ctx, l, func(tx pgx.Tx) error {
		res = RekeyResult{}
		batch, err := readRekeyBatch(ctx, tx, enc, after, limit, &res)
		if err != nil {
			return err
		}
		var b pgx.Batch
		batch.queue(&b, enc, index, &res)
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return RekeyResult{}, fmt.Errorf("store: rekey messages after %d: %w", after, err)
	}
	return res, nil
}

// rekeyBatch is one RekeyMessages batch as read: the sealed rows whose
// data keys are re-wrapped already (rewrap, with their new envelopes),
// and the plain rows still to seal.
type rekeyBatch struct {
	rewrap []int64
	envs   []crypt.Envelope
	plains []rekeyPlainRow
}

// rekeyPlainRow is a plain row RekeyMessages seals, as stored.
type rekeyPlainRow struct {
	id          int64
	m           NewMessage
	keys        []string
	fingerprint int64
}

// readRekeyBatch locks and reads at most limit messages after the id
// after that are not under the active key, and re-wraps the data keys of
// the sealed ones. It records in res the last id read, whether the batch
// was the last, and the rows whose key it cannot re-wrap.
func readRekeyBatch(ctx context.Context, tx pgx.Tx, enc *encState, after int64, limit int, res *RekeyResult) (rekeyBatch, error) {
	var batch rekeyBatch
	rows, err := tx.Query(ctx, `
SELECT id, enc_key_id, enc_dek, enc_nonce,
    CASE WHEN enc_key_id IS NULL THEN body END, CASE WHEN enc_key_id IS NULL THEN properties::text END,
    CASE WHEN enc_key_id IS NULL THEN headers::text END, CASE WHEN enc_key_id IS NULL THEN failure::text END,
    search_keys, fingerprint
FROM dead_messages WHERE id > $1 AND enc_key_id IS DISTINCT FROM $2
ORDER BY id LIMIT $3
FOR UPDATE SKIP LOCKED`, after, enc.ring.Active(), limit)
	if err != nil {
		return batch, err
	}
	n := 0
	for rows.Next() {
		var (
			id                      int64
			keyID                   *string
			env                     crypt.Envelope
			body                    []byte
			props, headers, failure *string
			keys                    []string
			fp                      int64
		)
		if err := rows.Scan(&id, &keyID, &env.DEK, &env.Nonce, &body, &props, &headers, &failure, &keys, &fp); err != nil {
			rows.Close()
			return batch, err
		}
		n++
		res.Last = id
		if keyID != nil {
			env.KeyID = *keyID
			re, err := enc.ring.Rewrap(env)
			if err != nil {
				res.Skipped = append(res.Skipped, RekeySkip{Table: tableMessages, ID: id, Err: err})
				continue
			}
			batch.rewrap = append(batch.rewrap, id)
			batch.envs = append(batch.envs, re)
			continue
		}
		p := rekeyPlainRow{id: id, keys: keys, fingerprint: fp}
		p.m.Body = nonNilBytes(body)
		p.m.Properties = rawOr(props, emptyObject)
		// Sealed as stored: an x-death header ingest left to the death
		// record stays there (the operations layer puts it back when it
		// opens the row).
		p.m.Headers = rawOr(headers, emptyObject)
		if failure != nil {
			p.m.Failure = json.RawMessage(*failure)
		}
		batch.plains = append(batch.plains, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return batch, err
	}
	res.Done = n < limit
	return batch, nil
}

// queue queues into b the writes of the batch: the re-wrapped data keys,
// the plain rows sealed, and their text documents dropped. It counts them
// in res, and records there the rows it cannot seal.
func (batch rekeyBatch) queue(b *pgx.Batch, enc *encState, index *crypt.Index, res *RekeyResult) {
	for i, id := range batch.rewrap {
		b.Queue(`UPDATE dead_messages SET enc_key_id = $2, enc_dek = $3 WHERE id = $1`, id, batch.envs[i].KeyID, batch.envs[i].DEK)
	}
	for _, p := range batch.plains {
		r, err := enc.sealMessage(index, p.id, &p.m)
		if err != nil {
			res.Skipped = append(res.Skipped, RekeySkip{Table: tableMessages, ID: p.id, Err: err})
			continue
		}
		// The keys were computed from the plain values at ingest; the
		// death history loses its failure messages, which are sealed in
		// new entries too. A row without a death record (x_death NULL:
		// stored before migration 00070 or by an older dlq, not yet
		// reached by backfill older_rows) gets it now, derived from its
		// plain headers as reads and that backfill derive it
		// (dlq_x_death; SET reads the old headers): once they are sealed,
		// the derivation would find none and the backfill would write []
		// for good.
		b.Queue(`
UPDATE dead_messages SET body = $2, properties = '{}', headers = $3, failure = NULL, failure_message = NULL,
    x_death = coalesce(x_death, dlq_x_death(headers)),
    message_id = NULL, search_keys = NULL, search_hashes = $4, fingerprint = $5, search_text = NULL, body_text_bytes = NULL,
    death_history = (SELECT jsonb_agg(e - 'failure_message' ORDER BY i) FROM jsonb_array_elements(death_history) WITH ORDINALITY AS h(e, i)),
    enc_key_id = $6, enc_dek = $7, enc_nonce = $8, enc_meta = $9
WHERE id = $1`, p.id, r.body, r.headers, index.Keys(p.keys), index.Fingerprint(p.fingerprint), r.env.KeyID, r.env.DEK, r.env.Nonce, r.meta)
		// A sealed row's text must not stay in plain in the text index:
		// the trigger of migration 00130 deletes its document, after the
		// indexer's step that may be writing it.
		res.Sealed++
	}
	res.Rewrapped = len(batch.rewrap)
}

func rawOr(s *string, def json.RawMessage) json.RawMessage {
	if s == nil {
		return def
	}
	return json.RawMessage(*s)
}
