package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestLostChannelIsNoWriteError: when the channel dies while a batch is
// being written, the writer cancels the write. That cancellation says
// nothing about PostgreSQL, so it must neither count as a write error nor
// keep the consumer unready: the broker takes the batch back, and the
// next session's writes decide. (A consumer that kept the error could stay
// unready for good, once others took the redeliveries.)
func TestLostChannelIsNoWriteError(t *testing.T) {
	b := setup(t, func(o *setupOpts) { o.consumers = 1 })
	held := b.holdSummary(t)
	waiters := held.waiters
	const n = 5
	for i := range n {
		b.publish(t, b.exchange, "k", amqp.Publishing{MessageId: fmt.Sprintf("held-%d", i), Body: []byte("held")})
	}
	dlqtest.Eventually(t, 20*time.Second, func() bool { return waiters() > 0 }, "the writer never waited on the summary row")

	require.NoError(t, dlqtest.CloseConnection(b.connName))
	// The consumer comes back on a new connection; the redelivered batch
	// waits on the same row, and until it fails the consumer is ready.
	dlqtest.Eventually(t, 30*time.Second, func() bool { return b.cons.Ready() == nil && waiters() > 0 },
		"consumer not ready again while its new write waits (waiters %d): %v", waiters(), b.cons.Ready())
	require.Zero(t, b.writeErrors(t), "a write cancelled with its channel is no write error")

	held.release()
	b.waitRows(t, n, "message_id LIKE 'held-%'")
	require.Equal(t, n, b.count(t, "message_id LIKE 'held-%'"), "each held message stored once")
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, b.app, b.queue) == 0 },
		"every delivery acknowledged")
	require.NoError(t, b.cons.Ready())
	require.Zero(t, b.writeErrors(t))
}

func (b *bundle) writeErrors(t *testing.T) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "dlq_ingest_write_errors_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("dlq_ingest_write_errors_total is not registered")
	return 0
}

// TestWriteErrorEndsWithItsSession: a write error describes the batch its
// session holds. When the session ends (here the queue is deleted under
// it), that batch is gone, and a consumer that saw no delivery since must
// not stay unready for an error nobody retries.
func TestWriteErrorEndsWithItsSession(t *testing.T) {
	b := setup(t, func(o *setupOpts) { o.consumers = 1 })
	ctx := context.Background()
	pool := b.db
	// Every insert fails with an error that is not about the data, as when
	// PostgreSQL refuses all writes.
	_, err := pool.Exec(ctx, `
CREATE FUNCTION refuse_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'test: writes refused'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON dead_messages FOR EACH ROW EXECUTE FUNCTION refuse_insert()`)
	require.NoError(t, err)
	b.publish(t, b.exchange, "k", amqp.Publishing{Body: []byte("refused")})
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		err := b.cons.Ready()
		return err != nil && strings.Contains(err.Error(), "writes refused")
	}, "the refused write never showed in readiness: %v", b.cons.Ready())

	// The queue goes with the held delivery; dlq declares it again, empty.
	_, err = b.ch.QueueDelete(b.queue, false, false, false)
	require.NoError(t, err)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return b.cons.Ready() == nil },
		"consumer not ready on its new, empty queue: %v", b.cons.Ready())

	_, err = pool.Exec(ctx, `DROP TRIGGER refuse ON dead_messages`)
	require.NoError(t, err)
	b.publish(t, b.exchange, "k", amqp.Publishing{MessageId: "after", Body: []byte("after")})
	b.waitRows(t, 1, "message_id = 'after'")
	require.NoError(t, b.cons.Ready())
}
