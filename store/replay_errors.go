package store

import (
	"context"
	"fmt"
)

// ReplayErrorCount is one reason a replay task could not publish some of
// its messages: the error each of them recorded (the item's detail, which
// is what the message's last_replay_error said when the task settled it),
// and how many.
type ReplayErrorCount struct {
	// Outcome is OutcomeFailed (not delivered) or OutcomeUnknown (the
	// confirm never came: perhaps delivered).
	Outcome string `json:"outcome"`
	Error   string `json:"error"`
	Count   int64  `json:"count"`
}

// ReplayErrors counts the failed and unknown items of a task by their
// error, most frequent first, at most limit reasons; rest counts the
// items of the reasons left out. Like ReplaySkipReasons it reads every
// item of the task (its primary key): call it for a task that has failed
// or unknown items.
func (s *Store) ReplayErrors(ctx context.Context, taskID int64, limit int) (reasons []ReplayErrorCount, rest int64, err error) {
	rows, err := s.pool.Query(ctx, `
SELECT outcome, coalesce(detail, ''), count(*)
FROM replay_task_items
WHERE task_id = $1 AND outcome IN ('failed', 'unknown')
GROUP BY 1, 2
ORDER BY 3 DESC, 1, 2`, taskID)
	if err != nil {
		return nil, 0, fmt.Errorf("store: errors of replay task %d: %w", taskID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r ReplayErrorCount
		if err := rows.Scan(&r.Outcome, &r.Error, &r.Count); err != nil {
			return nil, 0, fmt.Errorf("store: errors of replay task %d: %w", taskID, err)
		}
		if len(reasons) < limit {
			reasons = append(reasons, r)
		} else {
			rest += r.Count
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("store: errors of replay task %d: %w", taskID, err)
	}
	return reasons, rest, nil
}
