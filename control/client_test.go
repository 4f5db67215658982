package control_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
)

// The CLI's client takes DLQ_AMQP_URL as serve does: one URL or a
// cluster's nodes, of which it uses the first that answers.
func TestDialTriesEachURL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, "amqp://guest:guest@127.0.0.1:1/,"+dlqtest.AMQPURL(), "dlq.control", "token")
	require.NoError(t, err)
	require.NoError(t, c.Close())

	_, err = control.Dial(ctx, "amqp://127.0.0.1:1/,amqp://127.0.0.1:2/", "dlq.control", "token")
	require.ErrorIs(t, err, control.ErrUnreachable)
	require.ErrorContains(t, err, "127.0.0.1:1")
	require.ErrorContains(t, err, "127.0.0.1:2")
}

// TestUnansweredCommandExpires: a command no dlq takes while its caller
// waits expires in the queue, so that it does not run later, unexpected,
// after the caller reported it unanswered (and perhaps sent it again under
// a new id).
func TestUnansweredCommandExpires(t *testing.T) {
	t.Parallel()
	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	queue := dlqtest.Name(t, "ctl_idle")
	_, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, conn, queue)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, dlqtest.AMQPURL(), queue, "token")
	require.NoError(t, err)
	defer c.Close()
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
	defer ccancel()
	called := make(chan error, 1)
	go func() {
		_, err := c.Call(cctx, control.Command{Command: control.CmdAcknowledge, Request: replay.Request{IDs: []int64{1}}})
		called <- err
	}()
	dlqtest.Eventually(t, 3*time.Second, func() bool { return dlqtest.QueueDepth(t, conn, queue) == 1 },
		"the command was never queued")
	require.ErrorIs(t, <-called, control.ErrNoAnswer)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, conn, queue) == 0 },
		"the unanswered command is still queued")
}
