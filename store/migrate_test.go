package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
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
