package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/migrations"
	"github.com/dlq/dlq/store"
)

// A migration file can land after a higher-numbered one (numbers are per
// concern); a database migrated in between must get it on its next
// migration, not refuse to migrate.
func TestMigrateAppliesALowerNumberedLateFile(t *testing.T) {
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// Pretend 00025 (a constraint swap that can run twice) arrived late.
	tag, err := conn.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = 25`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "00025 was applied by the first migration")

	res, err := st.Migrate(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"00025_job_run_skipped.sql"}, res.Applied)
	require.Equal(t, res.From, res.To, "the schema version stays the highest applied")

	again, err := st.Migrate(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
}

// A dead letter of ordinary size is stored inline and uncompressed (no
// toast attempt per row at ingest), and headers keep their text exactly
// as written (json, not jsonb).
func TestDeadMessageRowStorage(t *testing.T) {
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	m := msg("orders", strings.Repeat("b", 1024), 7)
	m.Headers = json.RawMessage(`{"z":"last","a":{"type":"int32","value":1},"pad":"` + strings.Repeat("h", 1200) + `"}`)
	batch, _ := ingest(t, st, m)
	var compressed *string
	var headers string
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT pg_column_compression(headers), headers::text FROM dead_messages WHERE ingest_batch = $1`, batch).Scan(&compressed, &headers))
	require.Nil(t, compressed, "a 2.3 KB row is kept inline as it is")
	require.Equal(t, string(m.Headers), headers, "headers are stored byte for byte")
}

// Rows stored before migration 00050 have search keys but no hashes; the
// migration computes them in SQL, and a search (which probes the hashes
// computed in Go) must find those rows.
func TestSearchHashMigrationFillsExistingRows(t *testing.T) {
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	m := msg("orders", "body", 1)
	m.MessageID = "Before-00050"
	ingest(t, st, m)

	// Back to the schema before 00050, with its own Down section.
	src, err := fs.ReadFile(migrations.FS, "00050_search_hashes.sql")
	require.NoError(t, err)
	_, down, ok := strings.Cut(string(src), "-- +goose Down")
	require.True(t, ok)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, down)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = 50`)
	require.NoError(t, err)

	res, err := st.Migrate(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"00050_search_hashes.sql"}, res.Applied)
	page, err := st.ListMessages(ctx, store.Filter{Status: "all", Query: "before-00050"}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1, "the migrated row is found through its hashed key")
}

// Instances sharing a schema take turns migrating it: started at once on
// an empty schema, each finishes, one applies everything and the others
// find nothing left. (Other schemas of the database are not held up: the
// lock is the schema's.)
func TestMigrateConcurrentlyOnOneSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := dlqtest.Schema(t)
	const instances = 3
	results := make(chan store.MigrationResult, instances)
	errs := make(chan error, instances)
	for range instances {
		go func() {
			st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2})
			if err != nil {
				errs <- err
				results <- store.MigrationResult{}
				return
			}
			defer st.Close()
			res, err := st.Migrate(ctx, nil)
			errs <- err
			results <- res
		}()
	}
	applied := 0
	for range instances {
		require.NoError(t, <-errs)
	}
	for range instances {
		if len((<-results).Applied) > 0 {
			applied++
		}
	}
	require.Equal(t, 1, applied, "one instance applied the migrations, the others waited and found none")
}

// An instance that finds another migrating its schema waits for it, for as
// long as that takes (goose's own lock gave up after five minutes, and dlq
// serve exited while another instance still built an index), says so,
// and then finds nothing left to do.
func TestMigrateWaitsForAnotherMigrator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var schema string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, store.SchemaLockID(schema))
	require.NoError(t, err)

	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := st.Migrate(ctx, slog.New(slog.NewTextHandler(&logs, nil)))
		done <- err
	}()
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "another dlq is migrating this schema; waiting for it")
	}, "the waiting migrator does not say it waits")
	select {
	case err := <-done:
		t.Fatalf("Migrate returned while another held the lock: %v", err)
	case <-time.After(2 * time.Second):
	}
	_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, store.SchemaLockID(schema))
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Migrate still waits after the lock was released")
	}
	require.Contains(t, logs.String(), "migration lock taken")
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
