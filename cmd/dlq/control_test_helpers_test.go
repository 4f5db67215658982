package main

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// replayControl starts a control queue over st whose operations layer has
// a replay service (tasks are created, not run), with whatever tweak adds.
// It returns the queue's name and the whole tweak, so that an HTTP server
// over the same store (clitest.ServeWith) gets the same configuration.
func replayControl(t *testing.T, st *store.Store, tweak func(*ops.Config)) (string, func(*ops.Config)) {
	t.Helper()
	replays, err := replay.New(replay.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	all := func(c *ops.Config) {
		c.Replays = replays
		if tweak != nil {
			tweak(c)
		}
	}
	return clitest.Control(t, st, all), all
}

// controlEnv is the environment of a dlq command sent to the control
// queue with token (and no admin token of the test's own environment).
func controlEnv(queue, token string) []string {
	return []string{"DLQ_AMQP_URL=" + dlqtest.AMQPURL(), "DLQ_CONTROL_QUEUE=" + queue, "DLQ_TOKEN=" + token, "DLQ_ADMIN_TOKEN="}
}
