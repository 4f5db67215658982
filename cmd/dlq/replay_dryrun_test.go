package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
)

// TestReplayDryRunSaysApproval: `dlq replay --dry-run`, through the
// control queue, says on a line of its own whether the real replay would
// wait for approval and who may give it (four orders messages, above the
// threshold of three), or that it would not (two billing messages); with
// --json the answer holds approval_required.
func TestReplayDryRunSaysApproval(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	st, _, _ := clitest.Seeded(t)
	queue, _ := replayControl(t, st, func(c *ops.Config) { c.ApprovalAbove, c.Principals = 3, clitest.Principals(t) })
	env := controlEnv(queue, clitest.OperatorToken)
	for source, want := range map[string]string{
		"orders": "\napproval needed: the replay of 4 messages selects more than api.approval_above (3), so it will not run at once: " +
			"it waits for admin to approve it (dlq approve), for up to 24h, then expires unless approved\n",
		"billing": "\napproval not needed: the replay of 2 messages is within api.approval_above (3)\n",
	} {
		code, out, errOut := execDLQEnv(t, bin, env, "replay", "--queue", source, "--dry-run")
		require.Equal(t, cli.ExitOK, code, "%s%s", out, errOut)
		require.Contains(t, out, "dry run: ")
		require.Contains(t, out, want)

		code, out, errOut = execDLQEnv(t, bin, env, "replay", "--queue", source, "--dry-run", "--json")
		require.Equal(t, cli.ExitOK, code, "%s%s", out, errOut)
		var task replay.Task
		require.NoError(t, json.Unmarshal([]byte(out), &task), out)
		require.True(t, task.DryRun)
		require.NotNil(t, task.ApprovalRequired, out)
		require.Equal(t, source == "orders", *task.ApprovalRequired, out)
	}
}
