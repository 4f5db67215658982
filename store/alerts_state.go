package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AlertStateRecord is the alert state machine's saved state.
type AlertStateRecord struct {
	// State is the JSON document the alerts package produced; nil when no
	// evaluation has saved one yet.
	State     []byte
	Holder    string
	Token     int64
	UpdatedAt time.Time
	// ReadAt is the database's clock at the read: the state's times come
	// from that clock (the evaluation's snapshot), so its age and whether
	// it is stale are measured on it, not on the reader's host.
	ReadAt time.Time
}

// LoadAlertState returns the last saved alert state (State nil if none).
func (s *Store) LoadAlertState(ctx context.Context) (AlertStateRecord, error) {
	var r AlertStateRecord
	var updatedAt *time.Time
	err := s.pool.QueryRow(ctx, `
SELECT a.state, coalesce(a.holder, ''), coalesce(a.token, 0), a.updated_at, now()
FROM (SELECT) AS one LEFT JOIN alert_state a ON true`).
		Scan(&r.State, &r.Holder, &r.Token, &updatedAt, &r.ReadAt)
	if updatedAt != nil {
		r.UpdatedAt = *updatedAt
	}
	if err != nil {
		return AlertStateRecord{}, fmt.Errorf("store: load alert state: %w", err)
	}
	return r, nil
}

// SaveAlertState replaces the saved alert state under l. It fails with
// ErrLeaseLost when l is no longer the alerts job's current lease, so an
// instance that lost the job cannot overwrite its successor's state (and,
// because the caller notifies only after saving, cannot notify either).
func (s *Store) SaveAlertState(ctx context.Context, l Lease, state []byte) error {
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
INSERT INTO alert_state (id, state, holder, token, updated_at) VALUES (true, $1, $2, $3, now())
ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, holder = EXCLUDED.holder,
    token = EXCLUDED.token, updated_at = EXCLUDED.updated_at`, state, l.Holder, l.Token)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: save alert state: %w", err)
	}
	return nil
}
