package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/internal/cli/clitest"
)

// TestControlCommandsInTheOperatorsWords: dlq replay takes dlq ack's
// --yes as its --confirm (not "flag provided but not defined" and the
// whole usage); a refusal prints its code once; a refused token gets the
// advice the HTTP commands give.
func TestControlCommandsInTheOperatorsWords(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	st, _, _ := clitest.Seeded(t)
	queue, _ := replayControl(t, st, nil)
	env := controlEnv(queue, clitest.OperatorToken)

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
