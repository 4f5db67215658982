package cleanup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlq/dlq/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testLease takes a lease for a job name private to the test, for calling
// fenced store methods directly.
func testLease(t testing.TB, st *store.Store, job string) store.Lease {
	t.Helper()
	run, ok, err := st.BeginJobRun(ctxT(t), job, "test-holder", time.Now().UTC().Truncate(time.Millisecond), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	return run.Lease
}
