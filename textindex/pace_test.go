package textindex

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// TestPacingByDatabaseCPU: the pause follows the CPU the database spent
// on the batch when it is known, the batch's wall time otherwise; at the
// default duty it is nine times the cost.
func TestPacingByDatabaseCPU(t *testing.T) {
	ix, err := New(Config{Store: nilStore{}})
	require.NoError(t, err)
	took := 300 * time.Millisecond // mostly waiting for a core on a busy machine
	known := store.TextIndexResult{Rows: 500, DatabaseCPU: 40 * time.Millisecond, DatabaseCPUKnown: true}
	require.Equal(t, 360*time.Millisecond, ix.dutyPause(cost(known, took)))
	require.Equal(t, 2700*time.Millisecond, ix.dutyPause(cost(store.TextIndexResult{Rows: 500}, took)), "unknown: the wall time stands in")
	require.Zero(t, ix.dutyPause(cost(store.TextIndexResult{Rows: 5, DatabaseCPUKnown: true}, took)), "under a clock tick")

	half, err := New(Config{Store: nilStore{}, Duty: 50})
	require.NoError(t, err)
	require.Equal(t, 40*time.Millisecond, half.dutyPause(cost(known, took)))
}

type nilStore struct{ Store }
