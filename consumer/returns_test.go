package consumer_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func TestReturnsFromHeaders(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		redelivered bool
		headers     amqp.Table
		want        int
	}{
		{"first delivery", false, nil, 0},
		{"first delivery ignores stray counts", false, amqp.Table{"x-delivery-count": int64(4)}, 0},
		{"classic redelivery", true, nil, store.ReturnsUnknown},
		{"quorum 3.x", true, amqp.Table{"x-delivery-count": int64(2)}, 2},
		{"quorum 4.x", true, amqp.Table{"x-delivery-count": int64(0), "x-acquired-count": int64(3)}, 3},
		{"int32", true, amqp.Table{"x-delivery-count": int32(1)}, 1},
		{"garbage", true, amqp.Table{"x-delivery-count": "many"}, store.ReturnsUnknown},
		{"negative", true, amqp.Table{"x-delivery-count": int64(-5)}, store.ReturnsUnknown},
	}
	for _, c := range cases {
		d := &amqp.Delivery{Redelivered: c.redelivered, Headers: c.headers}
		require.Equal(t, c.want, consumer.Returns(d), c.name)
	}
}

// The counts are the real broker's: a quorum queue like dlq's own counts
// each return of a delivery whose channel closed unacknowledged, and the
// stored headers never show them (a redelivery must convert to the same
// fingerprint as the first delivery).
func TestReturnsFromQuorumQueue(t *testing.T) {
	t.Parallel()
	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	q := dlqtest.Name(t, "returns")
	_, err := ch.QueueDeclare(q, true, false, false, false, broker.OwnQueueArgs(conn.Properties["version"].(string)))
	require.NoError(t, err)
	t.Cleanup(func() { dlqtest.DeleteQueues(t, dlqtest.Dial(t), q) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte("x"), Headers: amqp.Table{"k": "v"}}))

	var fingerprints []int64
	for want := 0; want < 3; want++ {
		c := dlqtest.Channel(t, conn)
		require.NoError(t, c.Qos(1, 0, false))
		ds, err := c.Consume(q, "", false, false, false, false, nil)
		require.NoError(t, err)
		var d amqp.Delivery
		select {
		case d = <-ds:
		case <-ctx.Done():
			t.Fatalf("delivery %d never came", want)
		}
		require.Equal(t, want, consumer.Returns(&d), "delivery %d", want)
		m := consumer.Convert(&d, q, time.Now())
		require.NotContains(t, string(m.Headers), "x-delivery-count")
		require.Equal(t, want, m.Returns)
		fingerprints = append(fingerprints, m.Fingerprint)
		require.NoError(t, c.Close()) // unacknowledged: returned to the queue
	}
	require.Equal(t, fingerprints[0], fingerprints[1])
	require.Equal(t, fingerprints[0], fingerprints[2])
}
