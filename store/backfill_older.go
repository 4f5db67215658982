package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The backfill "older_rows": rows that no ingest of this version wrote
// have no death record (x_death NULL, migration 00070) and the default
// category, unknown (00075). They are the rows stored before the upgrade,
// the ones an older dlq stores while a rolling upgrade runs, and those
// whose death an older dlq replaced (the trigger of 00080 clears their
// record). Until the backfill reaches them, reads derive the record from
// the headers (dlq_x_death, about 0.4 to 0.7 ms a row, measured in
// docs/UPGRADING.md) and their category reads unknown; the backfill
// writes both once, and the failure group the category puts them in. The
// partial index dead_messages_older_rows holds exactly these rows, so a
// pass finds them without reading the others, and this version's ingest,
// which writes x_death, never enters it.

// OlderRowsPending counts the rows backfill older_rows has still to do
// (an index-only scan of the rows left, so cheap once few are).
func (s *Store) OlderRowsPending(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count the rows of backfill %s: %w", BackfillOlderRows, err)
	}
	return n, nil
}

// BackfillBatch is what one batch of a backfill did.
type BackfillBatch struct {
	// Rows is how many rows it did.
	Rows int64
	// Last is the highest id it looked at; 0 when no row after its start
	// needed it (the pass is over).
	Last int64
}

// BackfillOlderRows does one batch of backfill older_rows under l: up to
// limit rows without a death record and with ids above after, in id
// order, get their record (derived from their headers in SQL, as reads
// derive it) and, when categorize is not nil, their category by
// categorize and the failure group it puts them in, the groups' counters
// moved along. Rows another transaction holds are passed over (a later
// pass finds them). With encryption at rest on, categories stay as
// stored, as the categories job leaves them (RecategorizeBatch).
func (s *Store) BackfillOlderRows(ctx context.Context, l Lease, after int64, limit int, withHeaders bool,
	categorize func(CategoryInput) string) (BackfillBatch, error) {
	var res BackfillBatch
	rows, err := s.pool.Query(ctx, `SELECT id FROM dead_messages WHERE x_death IS NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return res, fmt.Errorf("store: backfill %s after id %d: %w", BackfillOlderRows, after, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return res, fmt.Errorf("store: backfill %s after id %d: %w", BackfillOlderRows, after, err)
	}
	if len(ids) == 0 {
		return res, nil
	}
	res.Last = ids[len(ids)-1]
	if s.enc != nil {
		categorize = nil
	}
	err = s.fenced(ctx, l, func(tx pgx.Tx) error {
		n, err := backfillOlderLocked(ctx, tx, ids, withHeaders, categorize)
		res.Rows = n
		return err
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			return res, err
		}
		return res, fmt.Errorf("store: backfill %s: %d rows after id %d: %w", BackfillOlderRows, len(ids), after, err)
	}
	return res, nil
}

// backfillOlderLocked locks those of ids that still lack a death record
// (skipping rows another transaction holds) and writes their records,
// categories and groups in tx; it returns how many it did.
func backfillOlderLocked(ctx context.Context, tx pgx.Tx, ids []int64, withHeaders bool, categorize func(CategoryInput) string) (int64, error) {
	headers := `NULL::json`
	if withHeaders {
		headers = `m.headers`
	}
	rows, err := tx.Query(ctx, `
SELECT m.id, m.source_queue, m.reason, coalesce(m.failure_type, ''), coalesce(m.failure_message, ''), m.category,
    `+headers+`, m.status, m.group_id, m.failed_at, m.enc_key_id IS NOT NULL
FROM dead_messages m WHERE m.id = ANY($1) AND m.x_death IS NULL ORDER BY m.id FOR NO KEY UPDATE SKIP LOCKED`, ids)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var (
		locked []int64
		cats   []*string
		groups []*int64
		moves  = map[int64]*groupChange{}
	)
	for rows.Next() {
		var (
			r      recategorizeRow
			sealed bool
		)
		if err := r.scan(rows, &sealed); err != nil {
			return 0, err
		}
		locked = append(locked, r.id)
		if categorize == nil || sealed {
			cats, groups = append(cats, nil), append(groups, nil)
			continue
		}
		next := categoryOf(categorize(r.in))
		k := newGroupKey(r.in.SourceQueue, r.in.Reason, r.in.FailureType, r.in.FailureMessage, next)
		switch {
		case r.group == nil:
			// Stored before failure groups existed: no group to move.
			cats, groups = append(cats, &next), append(groups, nil)
		case next != r.cat || *r.group != groupID(k):
			// A new category, or a group an older dlq chose without
			// categories for a death it replaced: the group of this one.
			g := r.regroup(moves, k)
			cats, groups = append(cats, &next), append(groups, &g)
		default:
			cats, groups = append(cats, nil), append(groups, nil)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(locked) == 0 {
		return 0, err
	}
	// The record as reads derive it: one statement over the batch, the
	// derivation planned once; only if some row's headers cannot be read,
	// row by row through dlq_x_death, which answers [] for those. Without
	// JIT: the derivation's estimated cost passes PostgreSQL's threshold,
	// and compiling it took 10 of the 11 seconds a batch of 1,000 rows
	// took with it (0.55 s without).
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		return 0, err
	}
	const update = `
UPDATE dead_messages m SET x_death = coalesce(%s, '[]'),
    category = coalesce(u.category, m.category), group_id = coalesce(u.group_id, m.group_id)
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(id, category, group_id)
WHERE m.id = u.id`
	if _, err := tx.Exec(ctx, `SAVEPOINT older_rows`); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(update, `(SELECT x FROM dlq_x_death_rows(m.headers) AS x)`), locked, cats, groups); err != nil {
		if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT older_rows`); rerr != nil {
			return 0, errors.Join(err, rerr)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(update, `dlq_x_death(m.headers)`), locked, cats, groups); err != nil {
			return 0, err
		}
	}
	if err := moveGroups(ctx, tx, moves); err != nil {
		return 0, err
	}
	return int64(len(locked)), nil
}
