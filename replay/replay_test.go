package replay_test

import (
	"context"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// A dead message replayed to its source arrives as the application sent
// it: same body, properties and header types, without the broker's death
// headers, with dlq's replay headers. The row is replayed, counted once.
//
// user_id comes back too: kept on request (replay.keep_user_id), and the
// connection's own user, so RabbitMQ takes it (TestReplayDropsUserIDByDefault
// covers the default).
func TestReplayRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.keepUserID = true })
	src := b.sourceQueue(t, nil)
	ts := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	app := amqp.Table{
		"string":  "héllo",
		"bool":    true,
		"nil":     nil,
		"int8":    int8(-8),
		"int16":   int16(-16000),
		"int32":   int32(math.MinInt32),
		"int64":   int64(math.MaxInt64),
		"float32": float32(1.5),
		"float64": 3.141592653589793,
		"decimal": amqp.Decimal{Scale: 3, Value: -12345},
		"time":    ts,
		"bytes":   []byte{0, 1, 2, 0xff},
		"table":   amqp.Table{"nested": amqp.Table{"deep": int32(7)}, "list": []any{"x", int64(1)}},
		"array":   []any{int8(1), float64(3.5), "four", nil, true},
	}
	sent := amqp.Publishing{
		ContentType: "application/json", ContentEncoding: "gzip", DeliveryMode: amqp.Persistent, Priority: 7,
		CorrelationId: "corr-1", ReplyTo: "replies", MessageId: "msg-rt", Timestamp: ts, Type: "order.created",
		UserId: "guest", AppId: "billing", Headers: app, Body: []byte(`{"order":42}`),
	}
	// Through the default exchange: the death record says exchange "" and
	// routing key = the queue, so the replay goes straight back to it.
	b.publish(t, "", src, sent)
	b.rejectAll(t, src, 1)
	b.waitRows(t, 1, "source_queue = $1", src)
	id := b.ids(t, "source_queue = $1", src)[0]

	task, err := b.svc.Start(context.Background(), replay.Request{IDs: []int64{id}}, operator)
	require.NoError(t, err)
	require.Equal(t, int64(1), task.Requested)
	task = b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(1), task.Published)
	require.Zero(t, task.Remaining)

	got := b.consume(t, src, 1, 10*time.Second)[0]
	require.Equal(t, sent.Body, got.Body)
	require.Equal(t, sent.ContentType, got.ContentType)
	require.Equal(t, sent.ContentEncoding, got.ContentEncoding)
	require.Equal(t, sent.DeliveryMode, got.DeliveryMode)
	require.Equal(t, sent.Priority, got.Priority)
	require.Equal(t, sent.CorrelationId, got.CorrelationId)
	require.Equal(t, sent.ReplyTo, got.ReplyTo)
	require.Equal(t, sent.MessageId, got.MessageId)
	require.True(t, sent.Timestamp.Equal(got.Timestamp))
	require.Equal(t, sent.Type, got.Type)
	require.Equal(t, sent.UserId, got.UserId)
	require.Equal(t, sent.AppId, got.AppId)

	h := got.Headers
	require.Equal(t, id, h[broker.HeaderID])
	require.Equal(t, int64(1), h[broker.HeaderReplayCount])
	rid, ok := h[broker.HeaderReplayID].(string)
	require.True(t, ok)
	require.Len(t, rid, 36)
	for k := range h {
		require.False(t, broker.IsBrokerHeader(k), "broker header %s replayed", k)
	}
	delete(h, broker.HeaderID)
	delete(h, broker.HeaderReplayCount)
	delete(h, broker.HeaderReplayID)
	// amqp091 reads timestamps in the local zone; the instant is the point.
	if tm, ok := h["time"].(time.Time); ok {
		h["time"] = tm.UTC()
	}
	require.Equal(t, app, h, "application headers keep their AMQP types")

	var status string
	var count int
	var replayedAt *time.Time
	require.NoError(t, b.db.QueryRow(context.Background(),
		`SELECT status, replay_count, replayed_at FROM dead_messages WHERE id = $1`, id).Scan(&status, &count, &replayedAt))
	require.Equal(t, store.StatusReplayed, status)
	require.Equal(t, 1, count)
	require.NotNil(t, replayedAt)
	require.Equal(t, int64(1), b.summary(t, src, store.StatusReplayed))
	require.Zero(t, b.summary(t, src, store.StatusPending))
	require.Zero(t, b.summary(t, src, store.StatusReplaying))
	b.requireSummaryExact(t)
}

// A replayed message rejected again comes back to its own record: pending,
// replay_count 1, no second row.
func TestReplayReDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src, ids := b.deadLetter(t, 1)
	task, err := b.svc.Start(context.Background(), replay.Request{IDs: ids}, operator)
	require.NoError(t, err)
	b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	b.rejectAll(t, src, 1)
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		return b.count(t, "id = $1 AND status = 'pending' AND replay_count = 1", ids[0]) == 1
	}, "record not back to pending with replay_count 1")
	require.Equal(t, 1, b.count(t, "source_queue = $1", src), "no second record")
	b.requireSummaryExact(t)
}
