package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestBatchFillsWhileWriterIsBusy: a batch whose linger has passed waits
// for the writer and keeps filling, instead of being cut and queued behind
// the batch being written; under load every batch is a commit saved.
func TestBatchFillsWhileWriterIsBusy(t *testing.T) {
	b := setup(t, func(o *setupOpts) { o.consumers = 1 })
	ctx := context.Background()
	b.publish(t, b.exchange, "k", amqp.Publishing{Body: []byte("warm-up")})
	b.waitRows(t, 1, "true")

	// Hold the queue's summary row: the writer's next batch waits on it.
	tx, err := b.st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // released below
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	_, err = tx.Exec(ctx, `SELECT 1 FROM queue_summary WHERE status = 'pending' FOR UPDATE`)
	require.NoError(t, err)
	b.publish(t, b.exchange, "k", amqp.Publishing{Body: []byte("blocker")})
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		var n int
		require.NoError(t, b.st.Pool().QueryRow(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&n))
		return n > 0
	}, "the writer never waited on the summary row")

	// Two waves, further apart than the linger (20 ms): the first is
	// lingered long before the second arrives.
	for wave := range 2 {
		for i := range 10 {
			b.publish(t, b.exchange, "k", amqp.Publishing{Body: fmt.Appendf(nil, "wave-%d-%d", wave, i)})
		}
		time.Sleep(300 * time.Millisecond) // spacing, not waiting for an effect
	}
	require.NoError(t, tx.Rollback(ctx))
	b.waitRows(t, 22, "true")

	var batches int
	require.NoError(t, b.st.Pool().QueryRow(ctx,
		`SELECT count(DISTINCT ingest_batch) FROM dead_messages WHERE substring(body from 1 for 5) = 'wave-'::bytea`).Scan(&batches))
	require.Equal(t, 1, batches, "both waves arrived while the writer was busy, so they form one batch")
}
