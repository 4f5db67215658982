package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
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
	require.NoError(t, b.st.Pool().QueryRow(context.Background(), `SELECT consumer FROM ingest_inflight LIMIT 1`).Scan(&consumer))
	require.Contains(t, tags, consumer, "ingest_inflight names batches by these tags")
	require.Equal(t, since, b.cons.WorkingSince(), "unchanged while nothing stops")

	b.stop()
	require.True(t, b.cons.WorkingSince().IsZero(), "stopped consumers are not working")
}
