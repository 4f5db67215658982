package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestWorkingSince: the cleanup of stale ingest_inflight rows relies on
// ConsumerTags naming what ingest_inflight records and on WorkingSince
// being set while every consumer works and cleared when one stops.
func TestWorkingSince(t *testing.T) {
	b := setup(t)
	since := b.cons.WorkingSince()
	require.False(t, since.IsZero(), "ready consumers are working")
	require.WithinDuration(t, time.Now(), since, time.Minute)

	tags := b.cons.ConsumerTags()
	require.Len(t, tags, 2)
	for _, tag := range tags {
		require.True(t, strings.HasPrefix(tag, "dlq-") && strings.Contains(tag, b.queue), tag)
	}
	b.publish(t, b.exchange, "k", amqp.Publishing{Body: []byte("working since")})
	b.waitRows(t, 1, "true")
	var consumer string
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT consumer FROM ingest_inflight LIMIT 1`).Scan(&consumer))
	require.Contains(t, tags, consumer, "ingest_inflight names batches by these tags")
	require.Equal(t, since, b.cons.WorkingSince(), "unchanged while nothing stops")

	b.stop()
	require.True(t, b.cons.WorkingSince().IsZero(), "stopped consumers are not working")
}

// TestConfirmedBatchStaysInflight: a batch whose ack the channel confirmed
// stays in ingest_inflight for a few seconds, since a quorum queue may
// still hold the ack back and drop it if the connection goes now; a
// redelivery must then still find the batch. Afterwards it leaves.
func TestConfirmedBatchStaysInflight(t *testing.T) {
	b := setup(t)
	b.publish(t, b.exchange, "k", amqp.Publishing{Body: []byte("held")})
	b.waitRows(t, 1, "true")
	var batch int64
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT batch_id FROM ingest_inflight`).Scan(&batch))
	seen := time.Now()

	inflight := func() bool {
		var n int
		require.NoError(t, b.db.QueryRow(context.Background(),
			`SELECT count(*) FROM ingest_inflight WHERE batch_id = $1`, batch).Scan(&n))
		return n == 1
	}
	// The writer flushes confirmed batches after a second without writes;
	// this one must survive several such flushes.
	for time.Since(seen) < 3*time.Second {
		require.True(t, inflight(), "batch %d left ingest_inflight %s after it was stored", batch, time.Since(seen))
		time.Sleep(100 * time.Millisecond)
	}
	dlqtest.Eventually(t, 20*time.Second, func() bool { return !inflight() }, "batch %d never left ingest_inflight", batch)
}
