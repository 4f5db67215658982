package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestAckExitCodesAndLimit: ack and rm exit with the same code with and
// without --json (4 for an id that does not exist, the answer still
// printed), and refuse --limit beside ids: it counts a filter's matches,
// and the ids were all acted on.
func TestAckExitCodesAndLimit(t *testing.T) {
	t.Parallel()
	url, _, dsn, ids := clitest.Server(t)
	db := dlqtest.DB(t, dsn)
	const admin = clitest.AdminToken
	acked := func() int {
		var n int
		require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages WHERE status = 'acknowledged'`).Scan(&n))
		return n
	}

	for _, name := range []string{"ack", "rm"} {
		code, _, errOut := cli(t, url, admin, runActionCmd(name), "99999")
		require.Equal(t, ExitNotFound, code, "dlq %s 99999: %s", name, errOut)
		code, out, errOut := cli(t, url, admin, runActionCmd(name), "--json", "99999")
		require.Equal(t, ExitNotFound, code, "dlq %s --json 99999: %s%s", name, out, errOut)
		require.Contains(t, errOut, "not found: 99999")
		var res store.ActionResult
		require.NoError(t, json.Unmarshal([]byte(out), &res), "the answer is printed all the same: %s", out)
		require.Equal(t, []int64{99999}, res.NotFound)
	}

	code, out, errOut := cli(t, url, admin, runActionCmd("ack"), "--json", fmt.Sprint(ids[0]))
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, `"changed": 1`)
	require.Equal(t, 1, acked())

	for _, args := range [][]string{
		{"--limit", "1", fmt.Sprint(ids[1]), fmt.Sprint(ids[2]), fmt.Sprint(ids[3])},
		{fmt.Sprint(ids[1]), "--limit", "1"},
		{"--limit", "0", fmt.Sprint(ids[1])},
	} {
		code, out, errOut = cli(t, url, admin, runActionCmd("ack"), args...)
		require.Equal(t, ExitUsage, code, "dlq ack %q: %s%s", args, out, errOut)
		require.Contains(t, errOut, "dlq ack: --limit applies to a filter")
	}
	require.Equal(t, 1, acked(), "nothing more was acknowledged")
	// With a filter, --limit takes so many of its matches.
	code, out, errOut = cli(t, url, admin, runActionCmd("ack"), "--queue", "orders", "--limit", "2")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "2 messages acknowledged")
	require.Equal(t, 3, acked())
}

// A dry run says what the real run would: an acknowledged message would
// not be acknowledged again.
func TestAckDryRunCountsWhatWouldChange(t *testing.T) {
	t.Parallel()
	url, _, _, ids := clitest.Server(t)
	id := fmt.Sprint(ids[0])
	code, out, errOut := cli(t, url, clitest.AdminToken, runActionCmd("ack"), id)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "1 messages acknowledged")

	code, out, errOut = cli(t, url, clitest.AdminToken, runActionCmd("ack"), "--dry-run", id)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "dry run: 0 messages would be acknowledged, 1 already acknowledged")
	code, real, errOut := cli(t, url, clitest.AdminToken, runActionCmd("ack"), id)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, real, "0 messages acknowledged, 1 already acknowledged")
}
