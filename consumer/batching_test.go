package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// heldSummary is a transaction holding the queue's pending summary row,
// which every ingest write updates: writes wait until it is released.
type heldSummary struct {
	t      *testing.T
	b      *bundle
	tx     pgx.Tx
	holder int32
}

// holdSummary stores a first message (creating the summary row) and holds
// the row until release or the end of the test.
func (b *bundle) holdSummary(t *testing.T) *heldSummary {
	t.Helper()
	ctx := context.Background()
	b.publish(t, b.exchange, "k", amqp.Publishing{Body: []byte("warm-up")})
	b.waitRows(t, 1, "true")
	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	h := &heldSummary{t: t, b: b, tx: tx}
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&h.holder))
	_, err = tx.Exec(ctx, `SELECT 1 FROM queue_summary WHERE status = 'pending' FOR UPDATE`)
	require.NoError(t, err)
	return h
}

// waiters counts the sessions waiting on the held row.
func (h *heldSummary) waiters() int {
	var n int
	require.NoError(h.t, h.b.db.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, h.holder).Scan(&n))
	return n
}

func (h *heldSummary) release() {
	require.NoError(h.t, h.tx.Rollback(context.Background()))
}

// TestBatchFillsWhileWriterIsBusy: a batch whose linger has passed waits
// for the writer and keeps filling, instead of being cut and queued behind
// the batch being written; under load every batch is a commit saved.
func TestBatchFillsWhileWriterIsBusy(t *testing.T) {
	b := setup(t, func(o *setupOpts) { o.consumers = 1 })
	ctx := context.Background()
	held := b.holdSummary(t)
	b.publish(t, b.exchange, "k", amqp.Publishing{Body: []byte("blocker")})
	dlqtest.Eventually(t, 20*time.Second, func() bool { return held.waiters() > 0 }, "the writer never waited on the summary row")

	// Two waves, further apart than the linger (20 ms): the first is
	// lingered long before the second arrives.
	for wave := range 2 {
		for i := range 10 {
			b.publish(t, b.exchange, "k", amqp.Publishing{Body: fmt.Appendf(nil, "wave-%d-%d", wave, i)})
		}
		time.Sleep(300 * time.Millisecond) // spacing, not waiting for an effect
	}
	held.release()
	b.waitRows(t, 22, "true")

	var batches int
	require.NoError(t, b.db.QueryRow(ctx,
		`SELECT count(DISTINCT ingest_batch) FROM dead_messages WHERE substring(body from 1 for 5) = 'wave-'::bytea`).Scan(&batches))
	require.Equal(t, 1, batches, "both waves arrived while the writer was busy, so they form one batch")
}
