package store

import (
	"context"
	"errors"
	"fmt"
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
// sent nothing (its item failed or was skipped, or its task is gone) is
// replaced. Two edits at once: the second finds the first's row locked,
// or collides with its insert, and is refused.
func recordEdit(ctx context.Context, tx pgx.Tx, taskID int64, n NewEdit, actor Actor) error {
	conflict := fmt.Errorf("message %d is already edited or being edited (edit the copy once it is stored): %w", n.MessageID, ErrConflict)
	var prev int64
	err := tx.QueryRow(ctx, `SELECT task_id FROM message_edits WHERE message_id = $1 FOR UPDATE`, n.MessageID).Scan(&prev)
	switch {
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
	// committed now (the row lock above waited for it).
	var replaceable bool
	err = tx.QueryRow(ctx, `
SELECT NOT EXISTS (SELECT 1 FROM replay_tasks WHERE id = $1)
    OR EXISTS (SELECT 1 FROM replay_task_items WHERE task_id = $1 AND message_id = $2 AND outcome IN ('failed', 'skipped'))`,
		prev, n.MessageID).Scan(&replaceable)
	if err != nil {
		return fmt.Errorf("store: read the edit of message %d: %w", n.MessageID, err)
	}
	if !replaceable {
		return conflict
	}
	_, err = tx.Exec(ctx, `UPDATE message_edits SET task_id = $2, copy_replay_id = $3, edited_by = $4, edited_at = now() WHERE message_id = $1`,
		n.MessageID, taskID, n.CopyReplayID, cleanText(actor.Name))
	if err != nil {
		return fmt.Errorf("store: record the edit of message %d: %w", n.MessageID, err)
	}
	return nil
}

// GetMessageEdit returns the latest edit of a message; ok is false when it
// was never edited.
func (s *Store) GetMessageEdit(ctx context.Context, messageID int64) (MessageEdit, bool, error) {
	var (
		e       MessageEdit
		outcome *string
		detail  *string
	)
	err := s.pool.QueryRow(ctx, `
SELECT e.task_id, e.copy_replay_id, e.edited_by, e.edited_at, i.outcome, i.detail
FROM message_edits e
LEFT JOIN replay_task_items i ON i.task_id = e.task_id AND i.message_id = e.message_id
WHERE e.message_id = $1`, messageID).Scan(&e.TaskID, &e.CopyReplayID, &e.EditedBy, &e.EditedAt, &outcome, &detail)
	if errors.Is(err, pgx.ErrNoRows) {
		return MessageEdit{}, false, nil
	}
	if err != nil {
		return MessageEdit{}, false, fmt.Errorf("store: read the edit of message %d: %w", messageID, err)
	}
	switch {
	case outcome == nil:
		e.State = EditInProgress
	case *outcome == OutcomePublished:
		e.State = EditSent
	case *outcome == OutcomeUnknown:
		e.State = EditUnknown
	default:
		e.State = EditFailed
	}
	if detail != nil && e.State != EditSent {
		e.Error = *detail
	}
	return e, true, nil
}
