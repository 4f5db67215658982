package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConsoleSession is one signed-in browser of the web console.
type ConsoleSession struct {
	// TokenName is the name of the token the operator signed in with; the
	// console resolves it to a principal on every request.
	TokenName string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// CreateConsoleSession records a session under the hash of its id (the
// id itself stays in the browser's cookie), expiring at expires.
func (s *Store) CreateConsoleSession(ctx context.Context, idHash []byte, tokenName string, expires time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO console_sessions (id_hash, token_name, expires_at) VALUES ($1, $2, $3)`,
		idHash, tokenName, expires)
	if err != nil {
		return fmt.Errorf("store: create console session for token %q: %w", tokenName, err)
	}
	return nil
}

// GetConsoleSession returns the session with this id hash; ErrNotFound
// when there is none or it has expired (by the database clock, so every
// instance agrees).
func (s *Store) GetConsoleSession(ctx context.Context, idHash []byte) (ConsoleSession, error) {
	var cs ConsoleSession
	err := s.pool.QueryRow(ctx, `
SELECT token_name, created_at, expires_at FROM console_sessions
WHERE id_hash = $1 AND expires_at > now()`, idHash).Scan(&cs.TokenName, &cs.CreatedAt, &cs.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return ConsoleSession{}, fmt.Errorf("store: console session: %w", ErrNotFound)
	}
	if err != nil {
		return ConsoleSession{}, fmt.Errorf("store: read console session: %w", err)
	}
	cs.CreatedAt, cs.ExpiresAt = cs.CreatedAt.UTC(), cs.ExpiresAt.UTC()
	return cs, nil
}

// DeleteConsoleSession ends a session (sign-out). Ending one that does not
// exist is not an error: the outcome is the same.
func (s *Store) DeleteConsoleSession(ctx context.Context, idHash []byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("store: delete console session: %w", err)
	}
	return nil
}

// DeleteExpiredConsoleSessions deletes at most limit sessions that expired
// before cutoff and returns how many it deleted; callers repeat until it
// returns less than limit. Expired sessions already sign nobody in
// (GetConsoleSession checks the time); this only reclaims their rows.
func (s *Store) DeleteExpiredConsoleSessions(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
DELETE FROM console_sessions WHERE id_hash IN (
    SELECT id_hash FROM console_sessions WHERE expires_at < $1 ORDER BY expires_at LIMIT $2)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("store: delete console sessions expired before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}
