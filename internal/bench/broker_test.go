package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// -dead-letter limits exists so that dlq and bench-limits' pipeline drain
// the same bytes: the dead letters must be the ones that program publishes
// (its dlqPublishing), or the ratio compares two workloads again.
func TestLimitsShapeIsTheRawPipelines(t *testing.T) {
	t.Parallel()
	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	queue := dlqtest.Name(t, "bench.limits")
	_, err := ch.QueueDeclare(queue, false, false, false, false, amqp.Table{"x-queue-type": "classic"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, conn, queue)

	const n, size = 45, 1024
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, prefillLimitsShape(ctx, conn, "", queue, n, size))

	for i := range n {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		require.True(t, ok, "message %d of %d is missing", i, n)
		source := fmt.Sprintf("svc-%02d", i%20)
		require.Equal(t, uint8(amqp.Persistent), d.DeliveryMode, "message %d", i)
		require.Equal(t, "application/octet-stream", d.ContentType, "message %d", i)
		require.True(t, strings.HasPrefix(d.MessageId, "m-"), "message %d: message id %q", i, d.MessageId)
		require.False(t, d.Timestamp.IsZero(), "message %d: no timestamp", i)
		require.Empty(t, d.CorrelationId+d.AppId+d.Type, "message %d: properties the raw pipeline does not set", i)
		require.Len(t, d.Body, size, "message %d", i)

		keys := make([]string, 0, len(d.Headers))
		for k := range d.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		require.Equal(t, []string{"x-death", "x-error", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"}, keys, "message %d", i)
		require.Equal(t, source, d.Headers["x-first-death-queue"], "message %d", i)
		deaths, ok := d.Headers["x-death"].([]any)
		require.True(t, ok && len(deaths) == 1, "message %d: x-death %#v, want one table", i, d.Headers["x-death"])
		death := deaths[0].(amqp.Table)
		require.Equal(t, source, death["queue"], "message %d", i)
		require.Equal(t, "rejected", death["reason"], "message %d", i)
		require.Equal(t, int64(1), death["count"], "message %d", i)
		require.Equal(t, []any{"orders.created"}, death["routing-keys"], "message %d", i)
	}
	_, more, err := ch.Get(queue, true)
	require.NoError(t, err)
	require.False(t, more, "more than %d messages published", n)
}
