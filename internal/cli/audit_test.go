package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// dataLines counts a table's lines after its header.
func dataLines(out string) int { return strings.Count(out, "\n") - 1 }

func TestAuditAgainstLiveServer(t *testing.T) {
	t.Parallel()
	url, _, _, ids := clitest.Server(t)
	const admin = clitest.AdminToken

	// Two actions to read back: an acknowledge by id, a delete by filter.
	code, _, errOut := cli(t, url, admin, runActionCmd("ack"), fmt.Sprint(ids[0]))
	require.Equal(t, ExitOK, code, errOut)
	code, _, errOut = cli(t, url, admin, runActionCmd("rm"), "--queue", "billing")
	require.Equal(t, ExitOK, code, errOut)

	code, out, _ := cli(t, url, admin, runAudit)
	require.Equal(t, ExitOK, code)
	require.True(t, strings.HasPrefix(out, "ID "), out)
	require.Equal(t, 2, dataLines(out), out)
	lines := strings.Split(out, "\n")
	require.Contains(t, lines[1], "delete", "newest first")
	require.Contains(t, lines[1], "admin")
	require.Contains(t, lines[1], "billing", "the selection")
	require.Contains(t, lines[2], "acknowledge")

	code, out, _ = cli(t, url, admin, runAudit, "--action", "acknowledge", "--actor", "admin", "--since", "1h")
	require.Equal(t, ExitOK, code)
	require.Equal(t, 1, dataLines(out), out)
	require.Contains(t, out, "acknowledge")
	code, out, _ = cli(t, url, admin, runAudit, "--actor", "nobody")
	require.Equal(t, ExitOK, code)
	require.Zero(t, dataLines(out), out)

	// Pages: one entry per page, the next one named on stderr or followed.
	code, out, errOut = cli(t, url, admin, runAudit, "--limit", "1")
	require.Equal(t, ExitOK, code)
	require.Equal(t, 1, dataLines(out), out)
	require.Contains(t, errOut, "more: dlq audit --cursor ")
	cursor := strings.Fields(strings.TrimPrefix(errOut, "more: dlq audit --cursor "))[0]
	code, out, _ = cli(t, url, admin, runAudit, "--limit", "1", "--cursor", cursor)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "acknowledge")
	code, out, errOut = cli(t, url, admin, runAudit, "--limit", "1", "--all")
	require.Equal(t, ExitOK, code)
	require.Equal(t, 2, dataLines(out), out)
	require.Empty(t, errOut)

	code, out, _ = cli(t, url, admin, runAudit, "--json")
	require.Equal(t, ExitOK, code)
	var page struct {
		Entries    []store.AuditEntry `json:"entries"`
		NextCursor *string            `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Entries, 2)
	require.Equal(t, store.ActionDelete, page.Entries[0].Action)
	require.Nil(t, page.NextCursor)

	// Exit codes: the audit log is the admin's; bad flags are usage.
	code, _, errOut = cli(t, url, clitest.ViewerToken, runAudit)
	require.Equal(t, ExitDenied, code)
	require.Contains(t, errOut, "forbidden")
	code, _, _ = cli(t, url, admin, runAudit, "--since", "last tuesday")
	require.Equal(t, ExitUsage, code)
	// An action outside the audit log's words is refused, naming them.
	code, _, errOut = cli(t, url, admin, runAudit, "--action", "ack")
	require.Equal(t, ExitUsage, code, errOut)
	require.Contains(t, errOut, `action "ack" must be one of acknowledge, delete, replay, replay_cancel`)
	code, _, _ = cli(t, url, admin, runAudit, "--limit", "0")
	require.Equal(t, ExitUsage, code)
	code, _, _ = cli(t, url, admin, runAudit, "--cursor", "garbage")
	require.Equal(t, ExitUsage, code)
	code, _, _ = cli(t, "http://127.0.0.1:1", admin, runAudit)
	require.Equal(t, ExitUnavailable, code)
}

// dlq audit -h names the least role the API asks for, and a token of
// that role reads the audit log.
func TestAuditHelpNamesTheRoleItNeeds(t *testing.T) {
	t.Parallel()
	role := string(ops.RoleFor(ops.ActAudit))
	code, _, errOut := cliWith(t, nil, runAudit, "-h")
	require.Equal(t, ExitOK, code)
	require.Contains(t, errOut, "("+role+" token or higher)")

	url, _, _, _ := clitest.Server(t)
	require.Equal(t, "operator", role, "the test's token below")
	code, _, errOut = cli(t, url, clitest.OperatorToken, runAudit)
	require.Equal(t, ExitOK, code, errOut)
}
