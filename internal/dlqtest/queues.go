package dlqtest

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// SourceQueue declares, on ch, an application queue of type typ that
// dead-letters to exchange (args add to those arguments or override
// them), deletes it through conn when the test ends, and returns its
// name.
func SourceQueue(t testing.TB, conn *amqp.Connection, ch *amqp.Channel, exchange, typ string, args amqp.Table) string {
	t.Helper()
	name := Name(t, "src")
	a := amqp.Table{"x-queue-type": typ, "x-dead-letter-exchange": exchange}
	for k, v := range args {
		a[k] = v
	}
	_, err := ch.QueueDeclare(name, true, false, false, false, a)
	require.NoError(t, err)
	DeleteQueues(t, conn, name)
	return name
}

// RejectAll consumes n messages from queue on a channel of its own and
// rejects them without requeue, which dead-letters them. It returns what
// it received.
func RejectAll(t testing.TB, conn *amqp.Connection, queue string, n int) []amqp.Delivery {
	t.Helper()
	ch := Channel(t, conn)
	require.NoError(t, ch.Qos(max(n, 1), 0, false))
	tag := Name(t, "rej")
	ds, err := ch.Consume(queue, tag, false, false, false, false, nil)
	require.NoError(t, err)
	defer func() { _ = ch.Cancel(tag, false) }()
	var out []amqp.Delivery
	timeout := time.After(20 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case d := <-ds:
			out = append(out, d)
			require.NoError(t, d.Reject(false))
		case <-timeout:
			t.Fatalf("received %d of %d messages from %s", i, n, queue)
		}
	}
	return out
}
