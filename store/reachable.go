package store

import (
	"context"
	"fmt"
	"time"

	"github.com/dlq/dlq/internal/tlsconf"
)

// The store's part in a process that starts before its database, or
// outlives it for a while: dlq serve starts while PostgreSQL is down, and
// keeps running through a restart of it.

// MigrateWhenReachable applies migrations, waiting for PostgreSQL if it is
// not up yet. A migration that fails while PostgreSQL answers is wrong in
// itself: retrying cannot help, and its error is returned at once.
func (s *Store) MigrateWhenReachable(ctx context.Context) (MigrationResult, error) {
	backoff := 500 * time.Millisecond
	for {
		res, err := s.Migrate(ctx, s.log)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("migrations not applied: %w", err)
		}
		if s.Ping(ctx) == nil {
			return res, err
		}
		if perr := s.permanent(err); perr != nil {
			return res, perr
		}
		s.log.Warn("PostgreSQL unreachable; migrations wait for it", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// CheckKeysWhenReachable is CheckKeys, waiting for PostgreSQL if it is
// not up yet.
func (s *Store) CheckKeysWhenReachable(ctx context.Context, configured []string) error {
	backoff := 500 * time.Millisecond
	for {
		err := s.CheckKeys(ctx, configured)
		if err == nil || ctx.Err() != nil || s.Ping(ctx) == nil {
			return err
		}
		if err := s.permanent(err); err != nil {
			return err
		}
		s.log.Warn("PostgreSQL unreachable; the encryption key check waits for it", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// permanent words a failure to reach PostgreSQL that waiting cannot mend:
// its certificate does not verify (sslmode=verify-full, sslrootcert).
func (s *Store) permanent(err error) error {
	if why, ok := tlsconf.Explain(err, "DLQ_DATABASE_URL's sslrootcert (and sslmode=verify-full)"); ok {
		return fmt.Errorf("store: cannot connect to PostgreSQL over TLS: %s", why)
	}
	return nil
}

// watchInterval is how often Watch pings PostgreSQL.
const watchInterval = 2 * time.Second

// Watch pings PostgreSQL every watchInterval until ctx ends, keeping
// Config.Up current even when nothing else uses the database, and logs
// when it becomes unreachable and reachable again. It returns nil when
// ctx ends.
func (s *Store) Watch(ctx context.Context) error {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	up := true
	for {
		err := s.Ping(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && up:
			s.log.Warn("PostgreSQL unreachable", "error", err)
		case err == nil && !up:
			s.log.Info("PostgreSQL reachable again")
		}
		up = err == nil
		if s.up != nil {
			if up {
				s.up.Set(1)
			} else {
				s.up.Set(0)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
