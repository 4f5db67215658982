package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// cli runs one operator command in-process.
func cli(t *testing.T, url, token string, run func([]string, cliEnv) int, args ...string) (int, string, string) {
	t.Helper()
	return cliWith(t, map[string]string{"DLQ_URL": url, "DLQ_TOKEN": token}, run, args...)
}

// cliWith runs one operator command in-process with these environment
// variables (and no other).
func cliWith(t *testing.T, vars map[string]string, run func([]string, cliEnv) int, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := cliEnv{getenv: func(k string) string { return vars[k] }, stdout: &out, stderr: &errOut}
	code := run(args, env)
	return code, out.String(), errOut.String()
}

func TestCLIAgainstLiveServer(t *testing.T) {
	t.Parallel()
	url, _, dsn, ids := clitest.Server(t)
	db := dlqtest.DB(t, dsn)
	const admin = "cli-admin-token"

	code, out, _ := cli(t, url, admin, runLs)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "ID")
	require.Contains(t, out, "TimeoutError: upstream took 500ms")
	require.Equal(t, 7, strings.Count(out, "\n"), "header + 6 messages")

	code, out, errOut := cli(t, url, admin, runLs, "--queue", "orders", "--limit", "2")
	require.Equal(t, ExitOK, code)
	require.Equal(t, 3, strings.Count(out, "\n"))
	require.Contains(t, errOut, "--cursor")
	code, out, _ = cli(t, url, admin, runLs, "--queue", "orders", "--limit", "2", "--all")
	require.Equal(t, ExitOK, code)
	require.Equal(t, 5, strings.Count(out, "\n"), "header + 4 orders")
	code, out, _ = cli(t, url, admin, runLs, "--q", "took 300ms", "--json", "--after", "1h")
	require.Equal(t, ExitOK, code)
	var page struct{ Messages []store.Message }
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page.Messages, 1)
	require.Equal(t, ids[3], page.Messages[0].ID)

	code, out, _ = cli(t, url, admin, runShow, fmt.Sprint(ids[0]))
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "m-0")
	require.Contains(t, out, `{"n":0}`)
	require.Contains(t, out, "x-death")
	code, _, _ = cli(t, url, "cli-viewer-token", runShow, fmt.Sprint(ids[0]))
	require.Equal(t, ExitOK, code)

	code, out, _ = cli(t, url, admin, runGroups)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "TimeoutError: upstream took <n>ms")
	require.Contains(t, out, "orders")

	code, out, _ = cli(t, url, admin, runStats)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "6 pending")
	require.Contains(t, out, "orders: 4 × TimeoutError")

	code, out, _ = cli(t, url, admin, runStatus)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "billing")
	code, out, _ = cli(t, url, admin, runStatus, "--json")
	require.Equal(t, ExitOK, code)
	require.True(t, json.Valid([]byte(out)))

	// ack: by ids, a filter above the threshold needs --yes, dry run counts.
	code, out, _ = cli(t, url, admin, runActionCmd("ack"), fmt.Sprint(ids[0]))
	require.Equal(t, ExitOK, code, out)
	code, out, _ = cli(t, url, admin, runActionCmd("ack"), "--queue", "orders", "--dry-run")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "dry run: 3 messages would be acknowledged")
	// dlq replay's spellings of the filter select the same; a category alone is a filter.
	code, out, errOut = cli(t, url, admin, runActionCmd("ack"), "--source-queue", "orders", "--since", "1h", "--dry-run")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "dry run: 3 messages would be acknowledged")
	code, out, errOut = cli(t, url, admin, runActionCmd("ack"), "--category", "transient,permanent,unknown", "--dry-run")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "dry run: 5 messages would be acknowledged")
	code, _, errOut = cli(t, url, admin, runActionCmd("ack"), "--queue", "orders", "--status", "all")
	require.Equal(t, ExitOK, code, errOut)
	code, _, errOut = cli(t, url, admin, runActionCmd("rm"), "--status", "all")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "--yes")
	code, out, _ = cli(t, url, admin, runActionCmd("rm"), "--status", "all", "--yes")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "6 messages deleted")
	var left int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages`).Scan(&left))
	require.Zero(t, left)

	// Exit codes that mean something.
	code, _, _ = cli(t, url, admin, runShow, fmt.Sprint(ids[0]))
	require.Equal(t, ExitNotFound, code)
	code, _, _ = cli(t, url, admin, runActionCmd("rm"), fmt.Sprint(ids[0]))
	require.Equal(t, ExitNotFound, code)
	code, _, errOut = cli(t, url, "", runLs)
	require.Equal(t, ExitDenied, code)
	require.Contains(t, errOut, "DLQ_TOKEN")
	code, _, _ = cli(t, url, "wrong", runStats)
	require.Equal(t, ExitDenied, code)
	code, _, _ = cli(t, url, "cli-viewer-token", runActionCmd("ack"), "1")
	require.Equal(t, ExitDenied, code)
	code, _, _ = cli(t, url, admin, runLs, "--status", "bogus")
	require.Equal(t, ExitUsage, code)
	// A reason outside the fixed set is refused, naming the set, in every
	// command that filters (not an empty page, a not found or a 0).
	for _, args := range [][]string{{"ls", "--reason", "reject"}, {"ack", "--reason", "reject", "--dry-run"}} {
		run := runLs
		if args[0] == "ack" {
			run = runActionCmd("ack")
		}
		code, _, errOut = cli(t, url, admin, run, args[1:]...)
		require.Equal(t, ExitUsage, code, errOut)
		require.Contains(t, errOut, `reason "reject" must be one of rejected, expired, maxlen, delivery_limit, unknown`)
	}
	code, _, _ = cli(t, url, admin, runLs, "--after", "last tuesday")
	require.Equal(t, ExitUsage, code)
	code, _, _ = cli(t, url, admin, runLs, "--no-such-flag")
	require.Equal(t, ExitUsage, code)
	code, _, _ = cli(t, url, admin, runShow)
	require.Equal(t, ExitUsage, code)
	code, _, _ = cli(t, url, admin, runActionCmd("ack"))
	require.Equal(t, ExitUsage, code)
	code, _, errOut = cli(t, "http://127.0.0.1:1", admin, runStatus)
	require.Equal(t, ExitUnavailable, code)
	require.Contains(t, errOut, "cannot reach dlq")
}

// runActionCmd binds runAction to a command name.
func runActionCmd(name string) func([]string, cliEnv) int {
	return func(args []string, env cliEnv) int { return runAction(name, args, env) }
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 12: "12", 1204: "1,204", 1234567: "1,234,567", -1000: "-1,000"} {
		require.Equal(t, want, thousands(n))
	}
}

// The errors of a wrong token or DLQ_URL, and of a refused filter, say
// what to change in the operator's words: the token sent was refused (not
// "send a bearer token"), DLQ_URL is a base URL with a scheme, and a
// filter error names the command's flags, not the API's parameters.
func TestCLIErrorsInTheOperatorsWords(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	const admin = clitest.AdminToken

	code, _, errOut := cli(t, url, "wrong", runLs)
	require.Equal(t, ExitDenied, code)
	require.Contains(t, errOut, "the token was refused")
	require.Contains(t, errOut, "DLQ_TOKEN or --token")
	require.NotContains(t, errOut, "send Authorization")

	code, out, errOut := cli(t, url+"/api/v1/", admin, runLs)
	require.Equal(t, ExitOK, code, "the API's prefix is taken off: %s", errOut)
	require.Contains(t, out, "TimeoutError")

	// A DLQ_URL at something else than dlq's API (the console's /ui/,
	// another service) answers without the API's error envelope: a
	// configuration fault, named, not "not found".
	other := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(other.Close)
	for _, run := range []func([]string, cliEnv) int{runStatus, runLs, runExport} {
		code, _, errOut = cli(t, other.URL+"/ui/", admin, run)
		require.Equal(t, ExitUsage, code, errOut)
		require.Contains(t, errOut, other.URL+"/ui/api/v1/")
		require.Contains(t, errOut, "answered HTTP 404, not in dlq's API error format")
		require.Contains(t, errOut, "must be dlq's base URL, such as http://host:8080")
	}

	code, _, errOut = cli(t, strings.TrimPrefix(url, "http://"), admin, runLs)
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "must start with http:// or https://")

	code, _, errOut = cli(t, url, admin, runLs, "--field", "customer.tier=gold")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "add --queue, --after, --group, message ids or --q")
	require.Contains(t, errOut, "--field: a field filter")
}
