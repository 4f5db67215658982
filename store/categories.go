package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CategoryState is the progress of recomputing stored categories (the cron
// job "categories"), as GET /api/v1/stats shows it.
type CategoryState struct {
	// RulesHash names the rules every stored row was categorised with, once
	// a pass with them completed ("" before the first).
	RulesHash   string     `json:"rules_hash"`
	CompletedAt *time.Time `json:"completed_at"`
	// Pass is the pass in progress, nil when none is.
	Pass *CategoryPass `json:"pass"`
}

// CategoryPass is a recategorisation pass: the rules it applies, the ids
// it covers (up to MaxID: later rows were categorised at ingest with the
// rules of the instance that stored them) and how far it got.
type CategoryPass struct {
	RulesHash string    `json:"rules_hash"`
	StartedAt time.Time `json:"started_at"`
	// Cursor is the last id done.
	Cursor  int64 `json:"cursor"`
	MaxID   int64 `json:"max_id"`
	Scanned int64 `json:"scanned"`
	Changed int64 `json:"changed"`
}

// ReadCategoryState returns the recategorisation's progress.
func (s *Store) ReadCategoryState(ctx context.Context) (CategoryState, error) {
	var (
		st        CategoryState
		hash      *string
		passHash  *string
		passStart *time.Time
		p         CategoryPass
	)
	err := s.pool.QueryRow(ctx, `
SELECT rules_hash, completed_at, pass_hash, pass_started_at, pass_cursor, pass_max_id, pass_scanned, pass_changed
FROM category_state`).Scan(&hash, &st.CompletedAt, &passHash, &passStart, &p.Cursor, &p.MaxID, &p.Scanned, &p.Changed)
	if err != nil {
		return CategoryState{}, fmt.Errorf("store: read category state: %w", err)
	}
	if hash != nil {
		st.RulesHash = *hash
	}
	if passHash != nil && passStart != nil {
		p.RulesHash, p.StartedAt = *passHash, passStart.UTC()
		st.Pass = &p
	}
	if st.CompletedAt != nil {
		t := st.CompletedAt.UTC()
		st.CompletedAt = &t
	}
	return st, nil
}

// StartCategoryPass starts a pass for the rules named hash, under l, over
// every row stored so far; it returns the pass.
func (s *Store) StartCategoryPass(ctx context.Context, l Lease, hash string) (CategoryPass, error) {
	p := CategoryPass{RulesHash: hash}
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
UPDATE category_state SET pass_hash = $1, pass_started_at = now(), pass_cursor = 0,
    pass_max_id = (SELECT coalesce(max(id), 0) FROM dead_messages), pass_scanned = 0, pass_changed = 0
RETURNING pass_started_at, pass_max_id`, hash).Scan(&p.StartedAt, &p.MaxID)
	})
	if err != nil {
		return CategoryPass{}, fmt.Errorf("store: start category pass: %w", err)
	}
	p.StartedAt = p.StartedAt.UTC()
	return p, nil
}

// SaveCategoryPass records the pass's progress under l; done completes it:
// its rules become the ones every stored row has.
func (s *Store) SaveCategoryPass(ctx context.Context, l Lease, p CategoryPass, done bool) error {
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
UPDATE category_state SET pass_cursor = $2, pass_scanned = $3, pass_changed = $4,
    rules_hash = CASE WHEN $5 THEN pass_hash ELSE rules_hash END,
    completed_at = CASE WHEN $5 THEN now() ELSE completed_at END,
    pass_hash = CASE WHEN $5 THEN NULL ELSE pass_hash END,
    pass_started_at = CASE WHEN $5 THEN NULL ELSE pass_started_at END
WHERE pass_hash = $1`, p.RulesHash, p.Cursor, p.Scanned, p.Changed, done)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%w: the category pass for rules %s is no longer the one in progress", ErrConflict, p.RulesHash)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: save category pass: %w", err)
	}
	return nil
}

// CategoryInput is what a category is computed from.
type CategoryInput struct {
	SourceQueue, Reason, FailureType, FailureMessage string
	// Headers is the stored typed JSON, read only when asked for.
	Headers json.RawMessage
}

// RecategorizeResult is what one batch of a pass did.
type RecategorizeResult struct {
	Scanned, Changed int64
	// Last is the last id looked at; 0 when there was none left.
	Last int64
}

// RecategorizeBatch recomputes the category of up to limit rows with ids
// in (after, maxID], in id order, with categorize, and moves every row
// whose category changed to its new failure group (the category is part of
// the group's key), adjusting the groups' counters, under l. Only the rows
// that change are locked, and they are read again under the lock, so a row
// that died again meanwhile is categorised from its latest death.
// withHeaders reads the headers for categorize (only rules on headers need
// them).
func (s *Store) RecategorizeBatch(ctx context.Context, l Lease, after, maxID int64, limit int, withHeaders bool,
	categorize func(CategoryInput) string) (RecategorizeResult, error) {
	var res RecategorizeResult
	if s.enc != nil {
		// Sealed rows hold their failure text encrypted and their groups'
		// ids are keyed: SQL can neither read nor move them. With
		// encryption at rest on, categories are what ingest computed
		// (docs/SECURITY.md); the pass ends at once.
		res.Last = maxID
		return res, nil
	}
	cols := `m.id, m.source_queue, m.reason, coalesce(m.failure_type, ''), coalesce(m.failure_message, ''), m.category`
	if withHeaders {
		cols += `, m.headers`
	} else {
		cols += `, NULL::json`
	}
	// Rows without a death record were written by no ingest of this
	// version: the backfill older_rows categorises them (with whatever
	// rules are current when it reaches them), so a pass does not write
	// them twice.
	rows, err := s.pool.Query(ctx, `SELECT `+cols+` FROM dead_messages m
WHERE m.id > $1 AND m.id <= $2 AND m.x_death IS NOT NULL ORDER BY m.id LIMIT $3`, after, maxID, limit)
	if err != nil {
		return res, fmt.Errorf("store: recategorize after id %d: %w", after, err)
	}
	type row struct {
		id  int64
		in  CategoryInput
		cat string
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.in.SourceQueue, &x.in.Reason, &x.in.FailureType, &x.in.FailureMessage, &x.cat, &x.in.Headers)
		return x, err
	})
	if err != nil {
		return res, fmt.Errorf("store: recategorize after id %d: %w", after, err)
	}
	var changed []int64
	for _, r := range all {
		if categorize(r.in) != r.cat {
			changed = append(changed, r.id)
		}
	}
	res.Scanned = int64(len(all))
	if len(all) > 0 {
		res.Last = all[len(all)-1].id
	}
	if len(changed) == 0 {
		return res, nil
	}
	err = s.fenced(ctx, l, func(tx pgx.Tx) error {
		n, err := recategorizeLocked(ctx, tx, cols, changed, categorize)
		res.Changed = n
		return err
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			return res, err
		}
		return res, fmt.Errorf("store: recategorize %d messages after id %d: %w", len(changed), after, err)
	}
	return res, nil
}

// recategorizeRow is a message's row as recategorizing reads it under its
// lock: what its category is computed from, and the category and failure
// group it is counted in now.
type recategorizeRow struct {
	id          int64
	in          CategoryInput
	cat, status string
	group       *int64
	failed      time.Time
}

// scan reads the row of rows selected as m.id, the CategoryInput columns
// (source_queue, reason, failure_type, failure_message), m.category, the
// headers, m.status, m.group_id and m.failed_at, then into extra the
// columns after those.
func (r *recategorizeRow) scan(rows pgx.Rows, extra ...any) error {
	return rows.Scan(append([]any{&r.id, &r.in.SourceQueue, &r.in.Reason, &r.in.FailureType, &r.in.FailureMessage, &r.cat,
		&r.in.Headers, &r.status, &r.group, &r.failed}, extra...)...)
}

// regroup moves the row (which has a group) from its failure group to k's
// in moves, and returns k's group id.
func (r *recategorizeRow) regroup(moves map[int64]*groupChange, k groupKey) int64 {
	groupMove(moves, *r.group, r.status, "", 1)
	return groupEnter(moves, k, r.in.FailureMessage, r.status, r.failed, nil)
}

// recategorizeLocked locks the rows of ids, computes their categories
// again from what they hold now, and moves those that change to their new
// category and failure group, counters included, in tx. cols are the
// columns RecategorizeBatch reads.
func recategorizeLocked(ctx context.Context, tx pgx.Tx, cols string, ids []int64, categorize func(CategoryInput) string) (int64, error) {
	rows, err := tx.Query(ctx, `SELECT `+cols+`, m.status, m.group_id, m.failed_at FROM dead_messages m
WHERE m.id = ANY($1) ORDER BY m.id FOR UPDATE`, ids)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var (
		changed []int64
		cats    []string
		groups  []*int64
		moves   = map[int64]*groupChange{}
	)
	for rows.Next() {
		var r recategorizeRow
		if err := r.scan(rows); err != nil {
			return 0, err
		}
		next := categoryOf(categorize(r.in))
		if next == r.cat {
			continue
		}
		changed, cats = append(changed, r.id), append(cats, next)
		if r.group == nil {
			// Stored before failure groups existed: it has none to move.
			groups = append(groups, nil)
			continue
		}
		g := r.regroup(moves, groupKey{r.in.SourceQueue, r.in.Reason, r.in.FailureType, NormalizeFailure(r.in.FailureMessage), next})
		groups = append(groups, &g)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(changed) == 0 {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `
UPDATE dead_messages m SET category = u.category, group_id = coalesce(u.group_id, m.group_id)
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(id, category, group_id)
WHERE m.id = u.id`, changed, cats, groups); err != nil {
		return 0, err
	}
	if err := moveGroups(ctx, tx, moves); err != nil {
		return 0, err
	}
	return int64(len(changed)), nil
}
