package main

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
)

// TestControlCommandsInTheOperatorsWords: dlq replay takes dlq ack's
// --yes as its --confirm (not "flag provided but not defined" and the
// whole usage); a refusal prints its code once; a refused token gets the
// advice the HTTP commands give.
func TestControlCommandsInTheOperatorsWords(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	st, _, _ := clitest.Seeded(t)
	replays, err := replay.New(replay.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	queue := clitest.Control(t, st, func(c *ops.Config) { c.Replays = replays })
	env := []string{"DLQ_AMQP_URL=" + dlqtest.AMQPURL(), "DLQ_CONTROL_QUEUE=" + queue, "DLQ_TOKEN=" + clitest.OperatorToken,
		"DLQ_ADMIN_TOKEN="}

	// Four messages of orders, above the threshold (three).
	code, out, errOut := execDLQEnv(t, bin, env, "replay", "--queue", "orders")
	require.Equal(t, cli.ExitUsage, code, out+errOut)
	require.Contains(t, errOut, "confirm_required")
	code, out, errOut = execDLQEnv(t, bin, env, "replay", "--queue", "orders", "--yes")
	require.Equal(t, cli.ExitOK, code, out+errOut)
	require.Contains(t, out, "replay task")

	code, out, errOut = execDLQEnv(t, bin, env, "replay", "--queue", "no-such-queue")
	require.Equal(t, cli.ExitNotFound, code, out+errOut)
	require.Equal(t, "dlq replay: not_found: no message matches the selection\n", errOut)

	code, out, errOut = execDLQEnv(t, bin, append(env, "DLQ_TOKEN=not-a-token"), "replays")
	require.Equal(t, cli.ExitDenied, code, out+errOut)
	require.Equal(t, "dlq replays: the token was refused (invalid_token): check that DLQ_TOKEN or --token is a token of this dlq\n", errOut)
}
