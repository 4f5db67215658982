package control_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
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
