package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// nowhere is a database URL on which nothing listens.
const nowhere = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1"

func TestMigrateWhenReachableMigratesAFreshSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dlqtest.Schema(t), MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	res, err := st.MigrateWhenReachable(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, res.Applied)
	again, err := st.MigrateWhenReachable(ctx)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
}

// While PostgreSQL does not answer the migration waits for it, until its
// context ends.
func TestMigrateWhenReachableWaitsUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: nowhere, MaxConns: 1})
	require.NoError(t, err)
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err = st.MigrateWhenReachable(ctx)
	require.Error(t, err)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "it retried until the context ended")
}

func TestWatchReportsWhetherPostgreSQLAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		url  string
		want float64
	}{
		{"reachable", dlqtest.DatabaseURLBase(), 1},
		{"unreachable", nowhere, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "up"})
			up.Set(-1)
			st, err := store.Open(context.Background(), store.Config{DatabaseURL: c.url, MaxConns: 1, Up: up})
			require.NoError(t, err)
			defer st.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- st.Watch(ctx) }()
			dlqtest.Eventually(t, 10*time.Second, func() bool { return testutil.ToFloat64(up) == c.want },
				"dlq_up{component=postgres} is not %v", c.want)
			cancel()
			require.NoError(t, <-done)
		})
	}
}
