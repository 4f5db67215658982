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
	// Hold identifies this reservation, when Reserved: RenewCommand and
	// ForgetCommand act on it only while it is still the caller's.
	Hold CommandHold
}

// CommandHold identifies one reservation of a command_id: the row's
// reserved_until as its holder last set it. A takeover needs the row's
// reserved_until in the past and sets it to now() plus a lease, later
// than any value the earlier holder set, so a holder whose reservation
// lapsed and was taken over no longer matches the row, and its late
// renewal or forget leaves the new holder's reservation alone. (Deleting
// it let a third delivery run the command beside the new holder.) No
// column was added, so an earlier dlq runs beside this one unchanged; its
// handlers still renew and forget by command_id alone.
type CommandHold struct {
	until time.Time
}

// ReserveCommand reserves commandID for principal, for lease. When the id
// is known it returns its answer, or Running when its handler is still at
// work; a reservation whose lease ran out without an answer is taken over.
func (s *Store) ReserveCommand(ctx context.Context, commandID, command, principal string, lease time.Duration) (CommandReservation, error) {
	var r CommandReservation
	var answer *string
	var reserved bool
	var until *time.Time
	err := s.pool.QueryRow(ctx, `
WITH ins AS (
    INSERT INTO control_commands (command_id, command, principal, reserved_until)
    VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
    ON CONFLICT (command_id) DO UPDATE SET reserved_until = EXCLUDED.reserved_until
        WHERE control_commands.answer IS NULL AND control_commands.reserved_until < now()
          AND control_commands.principal = EXCLUDED.principal AND control_commands.command = EXCLUDED.command
    RETURNING reserved_until
)
SELECT true, NULL::text, $3, $2, reserved_until FROM ins
UNION ALL
SELECT false, answer, principal, command, NULL FROM control_commands
WHERE command_id = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
		cleanText(commandID), command, cleanText(principal), lease.Milliseconds()).Scan(&reserved, &answer, &r.Principal, &r.Command, &until)
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
		r.Hold = CommandHold{until: *until}
	case answer != nil:
		r.Answer = *answer
	default:
		r.Running = true
	}
	return r, nil
}

// RenewCommand extends the reservation hold of a command its caller is
// still running to lease from now, and returns the hold to renew next. held
// is false, and nothing changed, when the reservation is no longer the
// caller's: it lapsed and a repeat took it over, or it was answered or
// forgotten; err is then ErrCommandAnswered when the answer came under the
// caller's own hold.
//
// The hold is the caller's while it matches the row, or while it has not
// lapsed: a takeover needs the row's hold to have lapsed, and the row's
// only grows until then, so a hold still in the future cannot have been
// taken over. That keeps a holder whose last renewal committed without
// its answer reaching it (a dropped connection: it kept the hold before),
// or whose row an earlier release's handler renewed by command id alone
// (during a rolling upgrade), renewing its own reservation.
func (s *Store) RenewCommand(ctx context.Context, commandID string, hold CommandHold, lease time.Duration) (next CommandHold, held bool, err error) {
	err = s.pool.QueryRow(ctx, `
UPDATE control_commands SET reserved_until = now() + $3 * interval '1 millisecond'
WHERE command_id = $1 AND answer IS NULL AND (reserved_until = $2 OR $2 > now())
RETURNING reserved_until`, cleanText(commandID), hold.until, lease.Milliseconds()).Scan(&next.until)
	if errors.Is(err, pgx.ErrNoRows) {
		return hold, false, s.whyNotRenewed(ctx, commandID, hold)
	}
	if err != nil {
		return hold, false, fmt.Errorf("store: renew control command %q: %w", commandID, err)
	}
	return next, true, nil
}

// ErrCommandAnswered is RenewCommand's answer when the command was
// answered while the caller's hold had not lapsed: nobody can have taken
// an unlapsed hold over, so the answer is the caller's own (a replay
// command saves it in the transaction that creates the task, before the
// handler returns). There is nothing left to renew, and nothing ran twice.
var ErrCommandAnswered = errors.New("store: control command answered under the caller's own reservation")

// whyNotRenewed tells a renewal that matched no row because its command
// was answered under the caller's hold (ErrCommandAnswered) from one whose
// reservation is gone otherwise (nil). It reads again rather than in the
// renewal's statement: an answer committed while the renewal waited for
// the row is newer than that statement's snapshot.
func (s *Store) whyNotRenewed(ctx context.Context, commandID string, hold CommandHold) error {
	var answeredHere bool
	err := s.pool.QueryRow(ctx, `
SELECT answer IS NOT NULL AND $2 > now() FROM control_commands WHERE command_id = $1`,
		cleanText(commandID), hold.until).Scan(&answeredHere)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("store: read why control command %q was not renewed: %w", commandID, err)
	case answeredHere:
		return ErrCommandAnswered
	}
	return nil
}

// SaveCommandAnswer records the answer of a reserved command. It needs no
// hold: a handler whose reservation lapsed and was taken over still ran
// the command, so its answer is the command's first (a repeat then gets
// it rather than run the command a third time); the taking-over handler's
// own answer, later, changes nothing.
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

// ForgetCommand drops the unanswered reservation hold, so that a retry of
// the command runs it (used when it failed for a reason a retry can fix,
// such as the database being unreachable). It reports false, and deletes
// nothing, when the reservation is no longer the caller's: a repeat that
// took it over holds it now.
func (s *Store) ForgetCommand(ctx context.Context, commandID string, hold CommandHold) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
DELETE FROM control_commands WHERE command_id = $1 AND answer IS NULL AND (reserved_until = $2 OR $2 > now())`,
		cleanText(commandID), hold.until)
	if err != nil {
		return false, fmt.Errorf("store: forget control command %q: %w", commandID, err)
	}
	return tag.RowsAffected() == 1, nil
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
