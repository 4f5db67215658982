package store

import (
	"context"
	"fmt"
)

// Why replay task items were skipped: the keys of ReplaySkipReasons.
const (
	SkipMaxReplays = "max_replays" // the loop guard: replayed max_replays times already
	SkipNotPending = "not_pending" // replayed, acknowledged or replaying elsewhere when its turn came
	SkipDeleted    = "deleted"     // deleted before its turn came
	SkipNotFound   = "not_found"   // no message ever had the id (a typo): never stored
	SkipOther      = "other"       // a reason this version does not know (written by a newer one)
)

// ReplaySkipReasons counts the skipped items of each task by reason. It
// reads the detail the claim (ClaimReplayBatch: "loop guard: …", "status
// is …"), SkipDeletedReplayItems ("deleted …") and CreateReplayTask
// ("deleted …", "never stored …") record with each skipped item, so it must change with them. It reads every item of the tasks
// (the items' primary key, no index on outcome: one would cost every
// settlement its HOT update): call it for tasks that have skipped items.
// Tasks without skips are absent from the result.
func (s *Store) ReplaySkipReasons(ctx context.Context, taskIDs []int64) (map[int64]map[string]int64, error) {
	out := map[int64]map[string]int64{}
	if len(taskIDs) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
SELECT task_id,
       CASE WHEN detail LIKE 'loop guard:%' THEN $2
            WHEN detail LIKE 'status is %' THEN $3
            WHEN detail LIKE 'deleted %' THEN $4
            WHEN detail LIKE 'never stored%' THEN $6
            ELSE $5 END,
       count(*)
FROM replay_task_items
WHERE task_id = ANY($1) AND outcome = 'skipped'
GROUP BY 1, 2`, taskIDs, SkipMaxReplays, SkipNotPending, SkipDeleted, SkipOther, SkipNotFound)
	if err != nil {
		return nil, fmt.Errorf("store: skip reasons of replay tasks %v: %w", taskIDs, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, n int64
		var reason string
		if err := rows.Scan(&id, &reason, &n); err != nil {
			return nil, fmt.Errorf("store: skip reasons of replay tasks %v: %w", taskIDs, err)
		}
		if out[id] == nil {
			out[id] = map[string]int64{}
		}
		out[id][reason] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: skip reasons of replay tasks %v: %w", taskIDs, err)
	}
	return out, nil
}
