package dlqtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// DB reaches the test's own schema: its migrated tables resolve, empty,
// and the connection's schema is the one named in the store's URL.
func TestDBReachesTheTestsSchema(t *testing.T) {
	t.Parallel()
	_, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	var n int
	require.NoError(t, db.QueryRow(t.Context(), `SELECT count(*) FROM dead_messages`).Scan(&n))
	require.Zero(t, n)
	var schema string
	require.NoError(t, db.QueryRow(t.Context(), `SELECT current_schema()`).Scan(&schema))
	require.Contains(t, dsn, schema)
	require.NotEqual(t, "public", schema)
}
