package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Backfills: work over existing rows that a migration must not do
// (docs/UPGRADING.md, "Migrations"). A migration that needs every row
// changed only adds what the change needs (a nullable column, an index
// of the rows still to do) and leaves the rows to a backfill, which the
// cron job "backfills" runs on one instance at a time, under its lease:
// in passes over the rows that still need it, by id, a batch per
// transaction, each batch fenced and saving the pass's place and
// progress (table backfills), so that a pass goes on where it stopped
// after a restart and on whichever instance holds the lease next. A
// backfill knows what a row it has not done looks like, so a pass finds
// the rows written after an earlier one (by an older dlq during a
// rolling upgrade) and the code that reads its rows stays right while it
// is unfinished: it derives what is not written yet.

// BackfillOlderRows names the backfill of rows no ingest of this version
// wrote (backfill_older.go).
const BackfillOlderRows = "older_rows"

// Backfills lists every backfill, in the order the job runs them.
func Backfills() []string { return []string{BackfillOlderRows} }

// BackfillState is a backfill's progress, as dlq migrate --status and
// the metrics show it.
type BackfillState struct {
	Name string `json:"name"`
	// StartedAt is when the pass in progress began; nil when none is.
	StartedAt *time.Time `json:"started_at"`
	// Cursor is the last id the pass has done.
	Cursor int64 `json:"cursor"`
	// Done is the rows the pass has done, Total the rows that needed it
	// when it began.
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// UpdatedAt is when the pass last saved its place.
	UpdatedAt time.Time `json:"updated_at"`
	// FinishedAt is when a pass last found nothing left; nil before.
	FinishedAt *time.Time `json:"finished_at"`
	// DoneEver is the rows done by every pass so far.
	DoneEver int64 `json:"done_ever"`
	// Waiting is the rows left for a pass that has not started yet (the
	// next tick of the backfills job starts it), read by MigrationsStatus
	// when no pass runs: rows an earlier version stored during a rolling
	// upgrade, after the last pass ended.
	Waiting int64 `json:"waiting"`
}

// Left reports whether the backfill has rows still to do, running or not.
func (b BackfillState) Left() bool { return b.Running() || b.Waiting > 0 }

// Running reports whether a pass is in progress.
func (b BackfillState) Running() bool { return b.StartedAt != nil }

// Remaining is the rows the pass in progress has still to do, as far as
// its start's count tells (0 when no pass runs).
func (b BackfillState) Remaining() int64 {
	if !b.Running() {
		return 0
	}
	return max(b.Total-b.Done, 0)
}

// Rate is the pass's rows per second so far; 0 before it has done any.
func (b BackfillState) Rate() float64 {
	if !b.Running() || b.Done == 0 {
		return 0
	}
	secs := b.UpdatedAt.Sub(*b.StartedAt).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(b.Done) / secs
}

// ETA is how long the pass in progress needs still at its rate so far; 0
// when that is not known.
func (b BackfillState) ETA() time.Duration {
	r := b.Rate()
	if r == 0 {
		return 0
	}
	return time.Duration(float64(b.Remaining()) / r * float64(time.Second))
}

// ReadBackfills returns the state of every backfill of Backfills, in that
// order; one that never ran is all zero but its name. Before migration
// 00080 there is no state: nil, without error.
func (s *Store) ReadBackfills(ctx context.Context) ([]BackfillState, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('backfills') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("store: read backfills: %w", err)
	}
	if !exists {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
SELECT name, started_at, cursor, done, total, updated_at, finished_at, done_ever FROM backfills WHERE name = ANY($1)`, Backfills())
	if err != nil {
		return nil, fmt.Errorf("store: read backfills: %w", err)
	}
	saved, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BackfillState, error) {
		var b BackfillState
		err := r.Scan(&b.Name, &b.StartedAt, &b.Cursor, &b.Done, &b.Total, &b.UpdatedAt, &b.FinishedAt, &b.DoneEver)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: read backfills: %w", err)
	}
	names := Backfills()
	out := make([]BackfillState, len(names))
	for i, name := range names {
		out[i].Name = name
		for _, b := range saved {
			if b.Name == name {
				out[i] = b
			}
		}
		utc(out[i].StartedAt)
		utc(out[i].FinishedAt)
		out[i].UpdatedAt = out[i].UpdatedAt.UTC()
	}
	return out, nil
}

func utc(t *time.Time) {
	if t != nil {
		*t = t.UTC()
	}
}

// StartBackfillPass starts a pass of backfill name under l, over the
// total rows that need it now, from the lowest id.
func (s *Store) StartBackfillPass(ctx context.Context, l Lease, name string, total int64) (BackfillState, error) {
	var b BackfillState
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
INSERT INTO backfills AS b (name, started_at, cursor, done, total, updated_at) VALUES ($1, now(), 0, 0, $2, now())
ON CONFLICT (name) DO UPDATE SET started_at = now(), cursor = 0, done = 0, total = $2, updated_at = now()
RETURNING name, started_at, cursor, done, total, updated_at, finished_at, done_ever`, name, total).
			Scan(&b.Name, &b.StartedAt, &b.Cursor, &b.Done, &b.Total, &b.UpdatedAt, &b.FinishedAt, &b.DoneEver)
	})
	if err != nil {
		return BackfillState{}, fmt.Errorf("store: start a pass of backfill %s: %w", name, err)
	}
	return b, nil
}

// SaveBackfillPass records, under l, that the pass of backfill name did
// rows more up to id cursor; finished ends the pass (nothing was left
// after cursor).
func (s *Store) SaveBackfillPass(ctx context.Context, l Lease, name string, cursor, rows int64, finished bool) error {
	err := s.fenced(ctx, l, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
UPDATE backfills SET cursor = $2, done = done + $3, done_ever = done_ever + $3, updated_at = now(),
    started_at = CASE WHEN $4 THEN NULL ELSE started_at END,
    finished_at = CASE WHEN $4 THEN now() ELSE finished_at END
WHERE name = $1 AND started_at IS NOT NULL`, name, cursor, rows, finished)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%w: backfill %s has no pass in progress", ErrConflict, name)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: save the pass of backfill %s at id %d: %w", name, cursor, err)
	}
	return nil
}
