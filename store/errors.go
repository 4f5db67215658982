package store

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Public sentinels. Callers test them with errors.Is; the API maps them to
// status codes.
var (
	// ErrNotFound means the requested row does not exist (or is outside the
	// caller's scope).
	ErrNotFound = errors.New("not found")
	// ErrConflict means the row exists but its state forbids the change, for
	// example deleting a message that is being replayed.
	ErrConflict = errors.New("conflict")
)

// IsDataError reports whether err is PostgreSQL refusing the data itself
// (SQLSTATE class 22, data exception; 23, integrity violation; or 54,
// program limit exceeded, e.g. a value too large for an index row).
// Retrying the same data cannot succeed, so the caller must change it.
// One integrity violation is not about the data: an ingest batch whose id
// is already registered, because an earlier attempt of it committed (its
// COMMIT's answer lost, the server restarted or failed over meanwhile).
// The caller asks CommittedRows then, as after any failed attempt.
func IsDataError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	if pgErr.Code == "23505" && pgErr.ConstraintName == "ingest_inflight_pkey" {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}
