package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/store"
)

// TestConfirmFlagBothNames: ack, rm and replay each take --yes and
// --confirm as one flag, and -h names the other name once, as an alias.
func TestConfirmFlagBothNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"yes", "confirm"} {
		var f replayFlags
		fs := flag.NewFlagSet("dlq replay", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		require.NoError(t, fs.Parse([]string{"--" + name, "--source-queue", "orders"}), name)
		require.True(t, f.confirm, "dlq replay --%s", name)
	}
	var f replayFlags
	fs := flag.NewFlagSet("dlq replay", flag.ContinueOnError)
	var help strings.Builder
	fs.SetOutput(&help)
	f.register(fs)
	fs.PrintDefaults()
	require.Equal(t, 1, strings.Count(help.String(), "-yes"), help.String())
	require.Contains(t, help.String(), "the same as --confirm")

	// Against the API: six messages, above the threshold (three).
	url, _, _, _ := clitest.Server(t)
	code, _, errOut := cli(t, url, clitest.AdminToken, runActionCmd("ack"), "--status", "all", "--dry-run", "--confirm")
	require.Equal(t, ExitOK, code, errOut)
	code, _, errOut = cli(t, url, clitest.AdminToken, runActionCmd("rm"), "-h")
	require.Equal(t, ExitOK, code)
	require.Equal(t, 1, strings.Count(errOut, "-confirm"), errOut)
	require.Contains(t, errOut, "the same as --yes")
	code, out, errOut := cli(t, url, clitest.AdminToken, runActionCmd("rm"), "--status", "all", "--confirm")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "6 messages deleted")
}

// TestControlRefusalInWords: a control-queue refusal prints its code once,
// not again in the message's words; a refused token gets the HTTP
// commands' advice, and a refusal whose message says more keeps it.
func TestControlRefusalInWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    control.CommandError
		code int
		want string
	}{
		{control.CommandError{Code: control.CodeNotFound, Message: "not found: no message matches the selection"}, ExitNotFound,
			"dlq replay: not_found: no message matches the selection\n"},
		{control.CommandError{Code: control.CodeNotFound, Message: "replay task 5: not found"}, ExitNotFound,
			"dlq replay: not_found: replay task 5\n"},
		{control.CommandError{Code: control.CodeConflict, Message: "conflict: replay task 4 already finished (completed)"}, ExitFailure,
			"dlq replay: conflict: replay task 4 already finished (completed)\n"},
		{control.CommandError{Code: control.CodeInvalidToken, Message: "invalid token"}, ExitDenied,
			"dlq replay: the token was refused (invalid_token): check that DLQ_TOKEN or --token is a token of this dlq\n"},
		{control.CommandError{Code: control.CodeInvalidToken, Message: "no token is configured, so the control queue accepts no command"},
			ExitDenied, "dlq replay: invalid_token: no token is configured, so the control queue accepts no command\n"},
	} {
		var w bytes.Buffer
		require.Equal(t, tc.code, refused(&w, "replay", &tc.e), tc.e.Message)
		require.Equal(t, tc.want, w.String())
	}
	var w bytes.Buffer
	require.Equal(t, ExitFailure, refused(&w, "replay", nil))
	require.Equal(t, "dlq replay: unknown: no error in the answer\n", w.String())

	// The HTTP commands say the same of a refused token.
	url, _, _, _ := clitest.Server(t)
	code, _, errOut := cli(t, url, "not-a-token", runStatus)
	require.Equal(t, ExitDenied, code)
	require.Contains(t, errOut, "check that DLQ_TOKEN or --token is a token of this dlq")
}

// TestAuditShowsTheLimit: a delete by filter with --limit shows the limit
// in the SELECTION column, not only in the JSON detail.
func TestAuditShowsTheLimit(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	code, out, errOut := cli(t, url, clitest.AdminToken, runActionCmd("rm"), "--queue", "orders", "--limit", "3", "--yes")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "3 messages deleted")
	code, out, errOut = cli(t, url, clitest.AdminToken, runAudit, "--action", "delete")
	require.Equal(t, ExitOK, code, errOut)
	require.Regexp(t, `(?m)\sdelete\s+3\s+\{"source_queue":"orders"[^\n]*\} limit 3$`, out)
}

// TestApproveSaysWhatRan: dlq approve says what the approved action did in
// words: the replay task to follow, or the counts as dlq ack says them.
func TestApproveSaysWhatRan(t *testing.T) {
	t.Parallel()
	url, _, _, _ := recoveryServer(t)
	approve := func(a []string, e cliEnv) int { return runDecide("approve", a, e) }

	code, out, errOut := cli(t, url, clitest.OperatorToken, runActionCmd("ack"), "--queue", "orders", "--yes")
	require.Equal(t, ExitOK, code, errOut)
	m := approvalID.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	code, out, errOut = cli(t, url, clitest.AdminToken, approve, m[1])
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "\n4 messages acknowledged\n")
	require.NotContains(t, out, "result:")

	// A replay, on a dlq of its own: four messages of orders.
	url, _, _, _ = recoveryServer(t)
	id := requestReplay(t, url, `{"filter":{"source_queue":"orders"},"confirm":true}`)
	code, out, errOut = cli(t, url, clitest.AdminToken, approve, strconv.FormatInt(id, 10))
	require.Equal(t, ExitOK, code, errOut)
	task := regexp.MustCompile(`replay task (\d+) started for 4 messages: follow it with dlq replays (\d+)\n`).FindStringSubmatch(out)
	require.NotNil(t, task, out)
	require.Equal(t, task[1], task[2])
	require.NotContains(t, out, "result:")
}

// requestReplay asks, as the operator, for a replay above the approval
// threshold and returns the id of its request for approval.
func requestReplay(t *testing.T, url, body string) int64 {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/api/v1/replays", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+clitest.OperatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(answer))
	var a struct{ Approval store.Approval }
	require.NoError(t, json.Unmarshal(answer, &a), string(answer))
	require.NotZero(t, a.Approval.ID, string(answer))
	return a.Approval.ID
}

// TestAPIRefusalSaysItsCodeOnce: an HTTP refusal prints its code once, as
// a control-queue refusal does.
func TestAPIRefusalSaysItsCodeOnce(t *testing.T) {
	t.Parallel()
	e := newAPIError(404, []byte(`{"error":{"code":"not_found","message":"not found: message 99"}}`))
	require.Equal(t, "not_found (HTTP 404): message 99", e.Error())
	e = newAPIError(409, []byte(`{"error":{"code":"conflict","message":"conflict"}}`))
	require.Equal(t, "conflict (HTTP 409)", e.Error())
	e = newAPIError(400, []byte(`{"error":{"code":"bad_request","message":"limit must be positive"}}`))
	require.Equal(t, "bad_request (HTTP 400): limit must be positive", e.Error())
}
