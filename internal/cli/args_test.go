package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
)

// TestCommandsWithoutArgumentsRefuseOne: a command that takes flags only
// refuses an argument (exit 2), saying which and what to give instead,
// rather than ignore the flags after it (the flag package stops at the
// first argument): `dlq ls orders --status all` listed the pending
// messages of every queue.
func TestCommandsWithoutArgumentsRefuseOne(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	for _, c := range []struct {
		name string
		run  func([]string, cliEnv) int
		args []string
	}{
		{"ls", runLs, []string{"orders", "--status", "all"}},
		{"groups", runGroups, []string{"orders", "--status", "all"}},
		{"export", runExport, []string{"orders", "--status", "all"}},
		{"stats", runStats, []string{"orders", "--json"}},
		{"status", runStatus, []string{"orders", "--json"}},
		{"audit", runAudit, []string{"orders", "--since", "1h"}},
		{"alerts", runAlerts, []string{"orders", "--json"}},
		{"policies", runPolicies, []string{"orders", "--json"}},
	} {
		code, out, errOut := cli(t, url, clitest.AdminToken, c.run, c.args...)
		require.Equal(t, ExitUsage, code, "dlq %s %q: %s%s", c.name, c.args, out, errOut)
		require.Empty(t, out, "dlq %s %q", c.name, c.args)
		require.Contains(t, errOut, `dlq `+c.name+`: unexpected argument "orders": dlq `+c.name+` takes flags only`)
		require.Contains(t, errOut, "see dlq "+c.name+" -h")
	}
	// dlq approvals takes one argument, a request's number.
	code, out, errOut := cli(t, url, clitest.AdminToken, runApprovals, "orders", "--limit", "1")
	require.Equal(t, ExitUsage, code, out+errOut)
	require.Contains(t, errOut, `dlq approvals: "orders" is not an approval id`)
	require.Contains(t, errOut, "see dlq approvals -h")
	_, _, errOut = cli(t, url, clitest.AdminToken, runLs, "orders", "--status", "all")
	require.Contains(t, errOut, "(a queue is --queue orders)")
	_, _, errOut = cli(t, url, clitest.AdminToken, runStats, "orders")
	require.NotContains(t, errOut, "--queue", "stats has no --queue")
	// Flags alone still work.
	code, out, errOut = cli(t, url, clitest.AdminToken, runLs, "--queue", "orders", "--status", "all")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, 5, strings.Count(out, "\n"), "header + 4 orders: %s", out)
}

// TestFlagsAfterArguments: the commands that take arguments read flags
// before and after them, as documented (`dlq policy pause orders-timeouts
// --reason "payments outage"`, `dlq reject 8 --reason ...`), and
// `dlq policy -h` is help (exit 0) that lists the flags.
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	url, _, db, ids := recoveryServer(t)
	const op = clitest.OperatorToken

	code, out, errOut := cli(t, url, op, runPolicy, "pause", "orders-retry", "--reason", "payments outage")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, "policy orders-retry is paused\n", out)
	code, out, _ = cli(t, url, clitest.ViewerToken, runPolicies)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "by operator: payments outage")
	code, out, errOut = cli(t, url, op, runPolicy, "resume", "orders-retry", "--json")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, `"paused": false`)
	code, _, errOut = cli(t, url, op, runPolicy, "pause", "orders-retry", "everywhere")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, `give one policy name, not 2: ["orders-retry" "everywhere"]`)
	code, _, errOut = cli(t, url, op, runPolicy, "stop", "orders-retry")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, `"stop" is neither pause nor resume`)

	for _, args := range [][]string{{"-h"}, {"--help"}, {"pause", "-h"}, {"resume", "--help"}} {
		code, _, errOut = cli(t, url, op, runPolicy, args...)
		require.Equal(t, ExitOK, code, "dlq policy %q", args)
		require.Contains(t, errOut, "usage: dlq policy pause", "dlq policy %q", args)
		// Help lists the flags, not the usage line alone.
		for _, f := range []string{"-url", "-token", "-json"} {
			require.Contains(t, errOut, f, "dlq policy %q", args)
		}
		if args[0] != "resume" {
			require.Contains(t, errOut, "-reason", "dlq policy %q", args)
		}
	}

	id := fmt.Sprint(ids[0])
	code, out, errOut = cli(t, url, op, runShow, id, "--json")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, `"message_id": "m-0"`)
	code, out, errOut = cli(t, url, op, runActionCmd("ack"), id, "--json", fmt.Sprint(ids[1]))
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, `"changed": 2`)
	var acked int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages WHERE status = 'acknowledged'`).Scan(&acked))
	require.Equal(t, 2, acked)
	// "--" ends the flags.
	code, _, errOut = cli(t, url, op, runActionCmd("ack"), "--", "--json")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, `"--json" is not a message id`)
}

// TestHelpShowsNoToken: -h prints each flag's default, and the token from
// the environment used to be --token's, so anyone who saw an operator's
// screen (or a pasted help text) saw the token.
func TestHelpShowsNoToken(t *testing.T) {
	t.Parallel()
	const secret = "sekrit-token-of-the-environment"
	runs := map[string]func([]string, cliEnv) int{
		"alerts": runAlerts, "audit": runAudit, "jobs": runJobs, "ls": runLs, "show": runShow,
		"approvals": runApprovals, "policies": runPolicies, "policy": runPolicy, "groups": runGroups,
		"stats": runStats, "status": runStatus, "export": runExport, "import": runImport,
		"ack":     func(a []string, e cliEnv) int { return runAction("ack", a, e) },
		"approve": func(a []string, e cliEnv) int { return runDecide("approve", a, e) },
	}
	for _, name := range []string{"DLQ_TOKEN", "DLQ_ADMIN_TOKEN"} {
		for cmd, run := range runs {
			code, out, errOut := cliWith(t, map[string]string{name: secret}, run, "-h")
			require.Equal(t, ExitOK, code, "dlq %s -h with %s set", cmd, name)
			require.Contains(t, errOut, "-token", "dlq %s -h lists its flags", cmd)
			require.NotContains(t, out+errOut, secret, "dlq %s -h with %s set", cmd, name)
		}
	}
}
