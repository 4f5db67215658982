package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// dlq ack and dlq rm --dry-run say whether the real action would wait for
// approval and who may give it, or that it would be refused; --json holds
// the same. The seeded store has four messages in orders and two in
// billing; approval is needed above three.
func TestDryRunSaysWhetherApprovalIsNeeded(t *testing.T) {
	t.Parallel()
	st, _, _ := clitest.Seeded(t)
	url := clitest.ServeWith(t, st, nil, func(c *ops.Config) {
		c.ApprovalAbove, c.Principals = 3, clitest.Principals(t)
	})
	for _, c := range []struct {
		token, cmd, queue string
		say               []string
	}{
		{clitest.OperatorToken, "ack", "orders", []string{
			"dry run: 4 messages would be acknowledged\n",
			"approval needed: the acknowledge of 4 messages selects more than api.approval_above (3), so it will not run at once: " +
				"it waits for admin to approve it (dlq approve), for up to 24h"}},
		{clitest.AdminToken, "rm", "orders", []string{
			"dry run: 4 messages would be deleted\n",
			"approval needed: the delete of 4 messages selects more than api.approval_above (3), and no configured token but admin may approve it",
			"the real request would be refused"}},
		{clitest.OperatorToken, "ack", "billing", []string{
			"dry run: 2 messages would be acknowledged\n",
			"approval not needed: the acknowledge of 2 messages is within api.approval_above (3)\n"}},
	} {
		code, out, errOut := cli(t, url, c.token, runActionCmd(c.cmd), "--queue", c.queue, "--dry-run")
		require.Equal(t, ExitOK, code, errOut)
		for _, s := range c.say {
			require.Contains(t, out, s, "dlq %s --queue %s --dry-run", c.cmd, c.queue)
		}

		code, out, errOut = cli(t, url, c.token, runActionCmd(c.cmd), "--queue", c.queue, "--dry-run", "--json")
		require.Equal(t, ExitOK, code, errOut)
		var res struct {
			DryRun           bool   `json:"dry_run"`
			ApprovalRequired *bool  `json:"approval_required"`
			ApprovalNote     string `json:"approval_note"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
		require.True(t, res.DryRun)
		require.NotNil(t, res.ApprovalRequired, out)
		require.Equal(t, c.queue == "orders", *res.ApprovalRequired, out)
		require.Contains(t, "approval "+res.ApprovalNote, strings.TrimSuffix(c.say[1], "\n"), out)
	}
}

// A delete refused because nobody but its requester could approve it
// exits 1, not 5 (token refused): the token is good, the selection too
// large; an operator token refused for its role still exits 5.
func TestRefusalForNoApproverIsNotATokenRefusal(t *testing.T) {
	t.Parallel()
	st, _, _ := clitest.Seeded(t)
	url := clitest.ServeWith(t, st, nil, func(c *ops.Config) {
		c.ApprovalAbove, c.Principals = 3, clitest.Principals(t)
	})
	code, out, errOut := cli(t, url, clitest.AdminToken, runActionCmd("rm"), "--queue", "orders", "--yes")
	require.Equal(t, ExitFailure, code, out+errOut)
	require.Contains(t, errOut, "needs a second person's approval")

	code, out, errOut = cli(t, url, clitest.ViewerToken, runActionCmd("rm"), "--queue", "billing", "--yes")
	require.Equal(t, ExitDenied, code, out+errOut)
}

// Through the control queue too, the refusal for want of an approver
// keeps the code forbidden, carries the reason no_approver, and the
// replay commands' exit code is 1, not 5.
func TestControlRefusalForNoApprover(t *testing.T) {
	t.Parallel()
	st, _, _ := clitest.Seeded(t)
	queue := clitest.Control(t, st, func(c *ops.Config) {
		c.ApprovalAbove, c.Principals = 3, clitest.Principals(t)
	})
	ctx := context.Background()
	c, err := control.Dial(ctx, dlqtest.AMQPURL(), queue, clitest.AdminToken)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	del := control.Command{Command: control.CmdDelete, Confirm: true,
		Request: replay.Request{Filter: &store.Filter{SourceQueue: "orders"}}}
	first := del
	first.CommandID = dlqtest.Name(t, "cmd")
	a, err := c.Call(ctx, first)
	require.NoError(t, err)
	require.False(t, a.OK)
	require.Equal(t, control.CodeForbidden, a.Error.Code)
	require.Equal(t, ops.ReasonNoApprover, a.Error.Reason)

	_, code := send(ctx, "rm", c, del, 20*time.Second)
	require.Equal(t, ExitFailure, code)
}
