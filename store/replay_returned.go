package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Messages back from the dead before the task sent them again: a claim
// passes over a message whose earlier publish had an unknown outcome and
// one of whose copies died and came back (ClaimReplayBatch).

// settleReturned settles as published the items, among ids (rows this
// transaction holds, pending), whose earlier publish had an unknown outcome
// and one of whose copies died and came back: the consumer raised the
// row's replay_count to the copy's x-dlq-replay-count. That copy was
// delivered, and the row holds its new death; sending it again would
// replay a message that already failed again. The item's detail is the
// replay id the copy died with, so that a canary knows it for its own
// (CanaryDiedAgain), and the row loses the unknown outcome's error.
func settleReturned(ctx context.Context, tx pgx.Tx, taskID int64, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
WITH r AS (
    UPDATE replay_task_items i SET outcome = 'published', detail = m.last_death_replay_id
    FROM dead_messages m
    WHERE i.task_id = $1 AND i.message_id = ANY($2) AND m.id = i.message_id AND i.outcome IS NULL
      AND i.copy_replay_count IS NOT NULL AND m.replay_count >= i.copy_replay_count
    RETURNING i.message_id
)
UPDATE dead_messages m SET last_replay_error = NULL FROM r WHERE m.id = r.message_id
RETURNING m.id`, taskID, ids)
	if err != nil {
		return nil, fmt.Errorf("store: settle returned messages of replay task %d: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("store: settle returned messages of replay task %d: %w", taskID, err)
	}
	slices.Sort(out)
	return out, nil
}

// passedOver returns the ids of claimable that the claim did not take.
func passedOver(claimable []int64, claimed []ClaimedMessage) []int64 {
	if len(claimable) == len(claimed) {
		return nil
	}
	took := make(map[int64]bool, len(claimed))
	for _, m := range claimed {
		took[m.ID] = true
	}
	var out []int64
	for _, id := range claimable {
		if !took[id] {
			out = append(out, id)
		}
	}
	return out
}

// without drops the items of the ids in drop (sorted) from skips.
func without(skips []claimSkip, drop []int64) []claimSkip {
	var kept []claimSkip
	for _, k := range skips {
		if _, found := slices.BinarySearch(drop, k.id); !found {
			kept = append(kept, k)
		}
	}
	return kept
}
