package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/migrations"
	"github.com/dlq/dlq/store"
)

// migrateStatus runs dlq migrate --status's printer and returns its exit
// code and output.
func migrateStatus(t *testing.T, st *store.Store) (int, string) {
	t.Helper()
	var b bytes.Buffer
	code := MigrateStatus(context.Background(), &b, st, time.Now())
	return code, b.String()
}

// TestMigrateStatus: dlq migrate --status lists every migration with when
// it was applied, says what is pending, what a newer dlq applied and which
// backfill pass runs and how far, and exits 0 only when nothing is left to
// do or under way.
func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	files, err := migrations.Files()
	require.NoError(t, err)

	code, out := migrateStatus(t, st)
	require.Equal(t, ExitOK, code, out)
	require.Contains(t, out, "migrations applied\n")
	for _, f := range files {
		require.Regexp(t, f.Name+` +20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC\n`, out)
	}
	require.Contains(t, out, "migrating now: nothing")
	require.Regexp(t, `older_rows +idle +- +- +- +- +never`, out)

	// A migration the schema lacks (as if it arrived with this dlq), and
	// one a newer dlq applied.
	last := files[len(files)-1]
	_, err = db.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, last.Version)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`)
	require.NoError(t, err)
	code, out = migrateStatus(t, st)
	require.Equal(t, ExitPending, code, out)
	require.Contains(t, out, "1 pending")
	require.Regexp(t, last.Name+` +pending\n`, out)
	require.Regexp(t, `99999 \(unknown here\) +20.* by a newer dlq`, out)
	require.NotContains(t, out, "offline", "an online migration is pending")
	_, err = db.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, last.Version)
	require.NoError(t, err)

	// A backfill pass under way.
	for range 3 {
		_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "older", Messages: []store.NewMessage{{
			SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", Properties: json.RawMessage(`{}`),
			Headers: json.RawMessage(`{}`), Body: []byte("b"), FirstFailedAt: time.Now(), FailedAt: time.Now(),
		}}})
		require.NoError(t, err)
	}
	// Rows no pass has started on yet (as an earlier version stores them
	// during a rolling upgrade, after the last pass): not done either.
	var waiting int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM dead_messages WHERE x_death IS NULL`).Scan(&waiting))
	require.Equal(t, 3, waiting, "rows without a death record, as an earlier version stores them")
	code, out = migrateStatus(t, st)
	require.Equal(t, ExitPending, code, out)
	require.Regexp(t, `older_rows +3 rows waiting for the next pass`, out)

	lease := dlqtest.Lease(t, st, "backfills")
	_, err = st.StartBackfillPass(ctx, lease, store.BackfillOlderRows, 3)
	require.NoError(t, err)
	require.NoError(t, st.SaveBackfillPass(ctx, lease, store.BackfillOlderRows, 1, 1, false))
	code, out = migrateStatus(t, st)
	require.Equal(t, ExitPending, code, out)
	require.Regexp(t, `older_rows +running since 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC +1 +3 `, out)
}

// TestMigrateStatusShowsTheMigrationInProgress: while a migration builds
// an index CONCURRENTLY and waits for an older transaction, --status names
// the session, what it waits for and the build's phase, without waiting
// for it.
func TestMigrateStatusShowsTheMigrationInProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A database of the test's own: the build waits for every older
	// transaction of its database.
	dsn := dlqtest.Database(t)
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	_, err = st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "t", Messages: []store.NewMessage{{
		SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", Properties: json.RawMessage(`{}`),
		Headers: json.RawMessage(`{}`), XDeath: json.RawMessage(`[]`), Body: []byte("b"), FirstFailedAt: time.Now(), FailedAt: time.Now(),
	}}})
	require.NoError(t, err)

	// Back to the schema before 00080, which builds an index of
	// dead_messages, with its own Down section.
	src, err := fs.ReadFile(migrations.FS, "00080_backfills.sql")
	require.NoError(t, err)
	_, down, ok := strings.Cut(string(src), "-- +goose Down")
	require.True(t, ok)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, stmt := range strings.Split(down, ";") {
		if strings.TrimSpace(stmt) != "" {
			_, err = conn.Exec(ctx, stmt)
			require.NoError(t, err)
		}
	}
	_, err = conn.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = 80`)
	require.NoError(t, err)

	// A writer's transaction the build must wait for.
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	_, err = tx.Exec(ctx, `UPDATE dead_messages SET status_changed_at = now()`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := st.Migrate(ctx, nil)
		done <- err
	}()
	var out string
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, out = migrateStatus(t, st)
		return code == ExitPending && strings.Contains(out, "waiting for older transactions to end")
	}, "--status does not show the migration waiting")
	require.Regexp(t, `migrating now: session \d+, since 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+s\), waiting for older transactions to end\n`, out)
	require.Contains(t, out, "CREATE INDEX CONCURRENTLY IF NOT EXISTS dead_messages_older_rows")
	require.Contains(t, out, "create index concurrently dead_messages_older_rows on dead_messages: waiting for writers before build")
	require.Regexp(t, `00080_backfills.sql +pending`, out)
	t.Logf("dlq migrate --status:\n%s", out)

	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)
	code, out := migrateStatus(t, st)
	require.Equal(t, ExitOK, code, out)
}
