package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Control-queue commands are remembered by command_id so that a repeated
// command returns its first answer and does nothing again. A command is
// reserved before it runs and answered after; the reservation has a lease
// so that a command whose handler died before answering can be run again
// by a later delivery rather than stay stuck forever.

// CommandReservation is the state of a command_id when a handler asks
// for it.
type CommandReservation struct {
	// Reserved is true when the caller now holds the command and must run
	// it and then SaveCommandAnswer (or ForgetCommand).
	Reserved bool
	// Answer is the stored first answer of a command already answered.
	Answer string
	// Principal and Command are who sent the command first, and what it was.
	Principal string
	Command   string
	// Running is true when another handler holds the command right now.
	Running bool
}

// ReserveCommand reserves commandID for principal, for lease. When the id
// is known it returns its answer, or Running when its handler is still at
// work; a reservation whose lease ran out without an answer is taken over.
func (s *Store) ReserveCommand(ctx context.Context, commandID, command, principal string, lease time.Duration) (CommandReservation, error) {
	var r CommandReservation
	var answer *string
	var reserved bool
	err := s.pool.QueryRow(ctx, `
WITH ins AS (
    INSERT INTO control_commands (command_id, command, principal, reserved_until)
    VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
    ON CONFLICT (command_id) DO UPDATE SET reserved_until = EXCLUDED.reserved_until
        WHERE control_commands.answer IS NULL AND control_commands.reserved_until < now()
          AND control_commands.principal = EXCLUDED.principal AND control_commands.command = EXCLUDED.command
    RETURNING true AS reserved
)
SELECT true, NULL::text, $3, $2 FROM ins
UNION ALL
SELECT false, answer, principal, command FROM control_commands
WHERE command_id = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
		cleanText(commandID), command, cleanText(principal), lease.Milliseconds()).Scan(&reserved, &answer, &r.Principal, &r.Command)
	if errors.Is(err, pgx.ErrNoRows) {
		// Inserted by someone else between the statement's snapshot and its
		// insert attempt, and not visible yet: it is running.
		return CommandReservation{Running: true}, nil
	}
	if err != nil {
		return CommandReservation{}, fmt.Errorf("store: reserve control command %q: %w", commandID, err)
	}
	r.Reserved = reserved
	switch {
	case reserved:
	case answer != nil:
		r.Answer = *answer
	default:
		r.Running = true
	}
	return r, nil
}

// RenewCommand extends the reservation of a command its caller is still
// running to lease from now.
func (s *Store) RenewCommand(ctx context.Context, commandID string, lease time.Duration) error {
	_, err := s.pool.Exec(ctx, `
UPDATE control_commands SET reserved_until = now() + $2 * interval '1 millisecond'
WHERE command_id = $1 AND answer IS NULL`, cleanText(commandID), lease.Milliseconds())
	if err != nil {
		return fmt.Errorf("store: renew control command %q: %w", commandID, err)
	}
	return nil
}

// SaveCommandAnswer records the answer of a reserved command.
func (s *Store) SaveCommandAnswer(ctx context.Context, commandID, answer string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("store: save answer of control command %q: %w", commandID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if err := saveAnswer(ctx, tx, commandID, answer); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func saveAnswer(ctx context.Context, tx pgx.Tx, commandID, answer string) error {
	_, err := tx.Exec(ctx, `
UPDATE control_commands SET answer = $2, answered_at = now() WHERE command_id = $1 AND answer IS NULL`,
		cleanText(commandID), answer)
	if err != nil {
		return fmt.Errorf("store: save answer of control command %q: %w", commandID, err)
	}
	return nil
}

// ForgetCommand drops an unanswered reservation, so that a retry of the
// command runs it (used when it failed for a reason a retry can fix, such
// as the database being unreachable).
func (s *Store) ForgetCommand(ctx context.Context, commandID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM control_commands WHERE command_id = $1 AND answer IS NULL`, cleanText(commandID))
	if err != nil {
		return fmt.Errorf("store: forget control command %q: %w", commandID, err)
	}
	return nil
}

// DeleteExpiredControlCommands deletes at most batch remembered commands
// received before olderThan and returns how many it deleted; callers repeat
// until it returns less than batch. A command_id repeated after its row is
// gone runs again, so olderThan should be well beyond any client's retry
// horizon (a day is plenty).
func (s *Store) DeleteExpiredControlCommands(ctx context.Context, olderThan time.Time, batch int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
DELETE FROM control_commands WHERE command_id IN (
    SELECT command_id FROM control_commands
    WHERE created_at < $1 AND (answer IS NOT NULL OR reserved_until < now())
    ORDER BY created_at LIMIT $2)`, olderThan, batch)
	if err != nil {
		return 0, fmt.Errorf("store: delete control commands older than %s: %w", olderThan.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}
