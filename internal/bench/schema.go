package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"

	"github.com/dlq/dlq/store"
)

// Each run makes its own schema and RabbitMQ names, with a random suffix.

// runSchema creates a run's schema. It returns the admin connection, a
// DSN whose search path starts at the schema, and done, which drops the
// schema (unless keep, to look at it after the run) and then closes the
// connection: defer it as soon as it is returned.
func runSchema(ctx context.Context, pgURL, schema string, keep bool) (*store.BenchAdmin, string, func(), error) {
	admin, err := store.OpenBenchAdmin(ctx, pgURL)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w (does database bench exist? `make bench-limits` creates it)", err)
	}
	if err := admin.CreateSchema(ctx, schema); err != nil {
		admin.Close(context.WithoutCancel(ctx))
		return nil, "", nil, err
	}
	done := func() {
		if !keep {
			_ = admin.DropSchema(context.WithoutCancel(ctx), schema)
		}
		admin.Close(context.WithoutCancel(ctx))
	}
	dsn, err := withSearchPath(pgURL, schema+",public")
	if err != nil {
		done()
		return nil, "", nil, err
	}
	return admin, dsn, done, nil
}

// withSearchPath returns dsn with its search_path set to path: a store
// opened on it works in the run's schema.
func withSearchPath(dsn, path string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("-pg must be a postgres:// URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", path)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// randomHex returns n random bytes in hex: the suffix of a run's names.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
