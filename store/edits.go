package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ActionEditReplay is the audit action of an edit-then-replay.
const ActionEditReplay = "edit_replay"

// Edit states, from the edit task's item: nothing yet, the copy sent (or
// perhaps sent: its confirm never came), nothing sent.
const (
	EditInProgress = "in_progress"
	EditSent       = "sent"
	EditUnknown    = "unknown"
	EditFailed     = "failed"
)

// MessageEdit is the latest edit of a message. Its JSON form is the
// message's "edited" field.
type MessageEdit struct {
	TaskID       int64     `json:"task_id"`
	CopyReplayID string    `json:"copy_replay_id"`
	EditedBy     string    `json:"edited_by"`
	EditedAt     time.Time `json:"edited_at"`
	State        string    `json:"state"`
	Error        string    `json:"error,omitempty"`
}

// recordEdit records message n.MessageID's edit by task inside tx. A
// message whose latest edit is in progress, sent, or of unknown outcome
// cannot be edited again (ErrConflict): one edit at a time, and once a copy
// may be out, the copy is what to edit once it is stored. An edit that
// sent nothing (EditFailed: its item failed or was skipped, or its task
// ended — cancelled, say — before it sent the copy), or whose task is
// gone, is replaced. Two edits at once: the second finds the first's row
// locked, or collides with its insert, and is refused. An edit whose
// replay id was derived after another edit than the latest recorded one
// (n.AfterTaskID) is refused too: its id could be that edit's copy's.
func recordEdit(ctx context.Context, tx pgx.Tx, taskID int64, n NewEdit, actor Actor) error {
	conflict := fmt.Errorf("message %d is already edited or being edited (edit the copy once it is stored): %w", n.MessageID, ErrConflict)
	var prev int64
	err := tx.QueryRow(ctx, `SELECT task_id FROM message_edits WHERE message_id = $1 FOR UPDATE`, n.MessageID).Scan(&prev)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && n.AfterTaskID != 0:
		return editedSince(n)
	case errors.Is(err, pgx.ErrNoRows):
		_, err = tx.Exec(ctx, `INSERT INTO message_edits (message_id, task_id, copy_replay_id, edited_by) VALUES ($1, $2, $3, $4)`,
			n.MessageID, taskID, n.CopyReplayID, cleanText(actor.Name))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation: an edit made at the same moment
			return conflict
		}
		if err != nil {
			return fmt.Errorf("store: record the edit of message %d: %w", n.MessageID, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("store: read the edit of message %d: %w", n.MessageID, err)
	}
	// A statement of its own, so that it sees the previous edit's task as
	// committed now (the row lock above waited for it). The state is read
	// as GetMessageEdit reads it, so that an edit it shows as failed is
	// one that may be redone.
	var replaceable bool
	err = tx.QueryRow(ctx, `
SELECT NOT EXISTS (SELECT 1 FROM replay_tasks WHERE id = e.task_id) OR `+editStateSQL+` = '`+EditFailed+`'
FROM `+editJoinSQL+`
WHERE e.message_id = $1`, n.MessageID).Scan(&replaceable)
	if err != nil {
		return fmt.Errorf("store: read the edit of message %d: %w", n.MessageID, err)
	}
	if !replaceable {
		return conflict
	}
	if prev != n.AfterTaskID {
		return editedSince(n)
	}
	_, err = tx.Exec(ctx, `UPDATE message_edits SET task_id = $2, copy_replay_id = $3, edited_by = $4, edited_at = now() WHERE message_id = $1`,
		n.MessageID, taskID, n.CopyReplayID, cleanText(actor.Name))
	if err != nil {
		return fmt.Errorf("store: record the edit of message %d: %w", n.MessageID, err)
	}
	return nil
}

// editedSince is the refusal of edit n whose copy's replay id was derived
// after another edit of the message than the latest one recorded.
func editedSince(n NewEdit) error {
	return fmt.Errorf("message %d was edited since the copy's replay id was derived (after edit task %d): edit it again: %w",
		n.MessageID, n.AfterTaskID, ErrConflict)
}

// editJoinSQL is a message's edit (e) with its task (t), its task's item
// of the message (i) and the message (m), as editStateSQL reads them.
const editJoinSQL = `message_edits e
LEFT JOIN replay_tasks t ON t.id = e.task_id
LEFT JOIN replay_task_items i ON i.task_id = e.task_id AND i.message_id = e.message_id
LEFT JOIN dead_messages m ON m.id = e.message_id`

// editStateSQL is the state of an edit (editJoinSQL): its item's outcome
// once settled. An item its task never settled is in progress while the
// task runs; once the task has ended (cancelled before it published the
// copy, say), nothing was sent and nothing will be — unless a publish of
// the copy had an unknown outcome (unknown_count: it may be out), or the
// task's runner still holds it or its claim of the message (a publish may
// still be under way: the runner of a cancelled task stops within one
// publish and then lets the task go, replay.taskRun.run).
const editStateSQL = `CASE
    WHEN i.outcome = '` + OutcomePublished + `' THEN '` + EditSent + `'
    WHEN i.outcome = '` + OutcomeUnknown + `' THEN '` + EditUnknown + `'
    WHEN i.outcome IS NOT NULL THEN '` + EditFailed + `'
    WHEN t.status IS NULL OR t.status NOT IN ('` + TaskCompleted + `', '` + TaskCancelled + `', '` + TaskFailed + `', '` + TaskCanaryFailed + `')
        THEN '` + EditInProgress + `'
    WHEN coalesce(i.unknown_count, 0) > 0 THEN '` + EditUnknown + `'
    WHEN (t.runner_owner IS NULL OR t.runner_expires_at < now())
         AND NOT coalesce(m.status = 'replaying' AND m.replay_task_id = e.task_id, false) THEN '` + EditFailed + `'
    ELSE '` + EditInProgress + `'
END`

// GetMessageEdit returns the latest edit of a message; ok is false when it
// was never edited.
func (s *Store) GetMessageEdit(ctx context.Context, messageID int64) (MessageEdit, bool, error) {
	var (
		e      MessageEdit
		detail *string
	)
	// A settled item's detail is its error; an unsettled one's holds the
	// replay ids of its copies, so the error of an edit whose task ended
	// before settling it is the task's (cancelled by …).
	err := s.pool.QueryRow(ctx, `
SELECT e.task_id, e.copy_replay_id, e.edited_by, e.edited_at, `+editStateSQL+`,
    CASE WHEN i.outcome IS NULL THEN t.error ELSE i.detail END
FROM `+editJoinSQL+`
WHERE e.message_id = $1`, messageID).Scan(&e.TaskID, &e.CopyReplayID, &e.EditedBy, &e.EditedAt, &e.State, &detail)
	if errors.Is(err, pgx.ErrNoRows) {
		return MessageEdit{}, false, nil
	}
	if err != nil {
		return MessageEdit{}, false, fmt.Errorf("store: read the edit of message %d: %w", messageID, err)
	}
	if detail != nil && e.State != EditSent && e.State != EditInProgress {
		e.Error = *detail
	}
	return e, true, nil
}

// MessagesWithKey returns the ids of at most limit stored messages within
// scope (nil: every queue) that have key (a header value, say: an edited
// copy's x-dlq-replay-id) among their search keys, lowest first, through
// the index on the keys' hashes (search.go). A message whose keys were cut
// at maxSearchKeys before reaching key is not found.
func (s *Store) MessagesWithKey(ctx context.Context, key string, scope []string, limit int) ([]int64, error) {
	_, index, err := s.sealing(ctx)
	if err != nil {
		return nil, err
	}
	args := sqlArgs{scope}
	keys := searchQuery{index: index}.hasKeys(&args, "m", strings.ToLower(strings.TrimSpace(key)))
	rows, err := s.pool.Query(ctx, `SELECT m.id FROM dead_messages m
WHERE ($1::text[] IS NULL OR m.source_queue = ANY($1)) AND `+keys+` ORDER BY m.id LIMIT `+args.add(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("store: look up messages with key %q: %w", key, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("store: look up messages with key %q: %w", key, err)
	}
	return ids, nil
}
