package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
)

// A listing that finds nothing says so, and names a --queue dlq holds no
// message of, a likely typo; --json prints the answer only.
func TestEmptyListingsSaySo(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	const admin = clitest.AdminToken

	code, out, errOut := cli(t, url, admin, runLs, "--queue", "ordres")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, 0, dataLines(out), out)
	require.Contains(t, errOut, "dlq ls: no messages match\n")
	require.Contains(t, errOut, `dlq holds no message of queue "ordres"`)

	// A queue dlq holds, with nothing in the status asked for.
	code, _, errOut = cli(t, url, admin, runLs, "--queue", "orders", "--status", "acknowledged")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, "dlq ls: no messages match\n", errOut)

	code, out, errOut = cli(t, url, admin, runLs, "--queue", "ordres", "--json")
	require.Equal(t, ExitOK, code, errOut)
	require.Empty(t, errOut)
	require.Contains(t, out, `"messages": []`)

	// Groups list those with pending messages by default: once billing's
	// are acknowledged, its groups are left out, and the line says how to
	// see them.
	code, _, errOut = cli(t, url, admin, runActionCmd("ack"), "--queue", "billing")
	require.Equal(t, ExitOK, code, errOut)
	code, out, errOut = cli(t, url, admin, runGroups, "--queue", "billing")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, 0, dataLines(out), out)
	require.Equal(t, "dlq groups: no groups match with pending messages (--status all lists every group)\n", errOut)
	code, out, errOut = cli(t, url, admin, runGroups, "--queue", "billing", "--status", "all")
	require.Equal(t, ExitOK, code, errOut)
	require.Positive(t, dataLines(out), out)
	require.Empty(t, errOut)
}
