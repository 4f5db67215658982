package store

import (
	"context"
	"fmt"
)

// EmptyStoreSettled says what SettleEmptyStore recorded.
type EmptyStoreSettled struct {
	// Summary: the summary's first reconciliation pass is taken as done.
	Summary bool
	// Categories: the rules are taken as those every stored row has.
	Categories bool
}

// SettleEmptyStore records, while dead_messages holds no row, that the
// first passes of the summary and categories jobs have nothing to do: the
// summary's bootstrap count proves queue_summary against rows stored before
// it existed, and the categories pass recomputes rows stored under other
// rules (rulesHash, category.Rules.Hash; "" leaves the categories alone).
// With no row stored, both are true at once, and every row stored from
// now on maintains the summary and gets its category in its own
// transaction.
//
// `dlq serve` calls it before ingest starts. Without it those passes ran at
// the jobs' first tick, a minute after start, over every row a backlog had
// stored by then: at a million, seconds of PostgreSQL's CPU in the middle
// of the drain. The next reconciliation pass comes ReconcileInterval
// later, as after any other.
//
// It changes nothing once a row exists, a pass is under way or the state
// was recorded before. A row another instance stores meanwhile keeps the
// summary and its category itself, in its transaction, so it needs no pass
// either (instances run with the same rules).
func (s *Store) SettleEmptyStore(ctx context.Context, rulesHash string) (EmptyStoreSettled, error) {
	var out EmptyStoreSettled
	err := s.pool.QueryRow(ctx, `
WITH empty AS (
    SELECT NOT EXISTS (SELECT 1 FROM dead_messages)
       AND NOT EXISTS (SELECT 1 FROM queue_summary WHERE messages <> 0 OR bytes <> 0) AS yes
), summary AS (
    UPDATE summary_state SET bootstrapped_at = now(), last_pass_at = now()
    WHERE bootstrapped_at IS NULL AND pass_started_at IS NULL AND (SELECT yes FROM empty)
    RETURNING 1
), categories AS (
    UPDATE category_state SET rules_hash = $1, completed_at = now()
    WHERE $1 <> '' AND rules_hash IS NULL AND pass_hash IS NULL AND (SELECT yes FROM empty)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM summary), EXISTS (SELECT 1 FROM categories)`, rulesHash).Scan(&out.Summary, &out.Categories)
	if err != nil {
		return EmptyStoreSettled{}, fmt.Errorf("store: record that an empty store needs no first summary or category pass: %w", err)
	}
	return out, nil
}
