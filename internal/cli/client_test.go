package cli

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/cli/clitest"
)

// TestStreamingCommandsTrustCAFile: export and import reach an https://
// API with the CA of --ca-file (DLQ_CA_FILE), like every other API
// command; without it the certificate is refused.
func TestStreamingCommandsTrustCAFile(t *testing.T) {
	t.Parallel()
	st, _, _ := clitest.Seeded(t)
	url, ca := clitest.ServeTLS(t, st)
	env := map[string]string{"DLQ_URL": url, "DLQ_TOKEN": clitest.AdminToken, "DLQ_CA_FILE": ca}
	file := filepath.Join(t.TempDir(), "all.ndjson")

	code, _, errOut := cliWith(t, env, runExport, "--status", "all", "--output", file)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, errOut, "exported 6 messages")
	code, out, errOut := cliWith(t, env, runImport, file)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "0 messages imported, 6 skipped", "the same dlq: stored before")
	code, _, errOut = cliWith(t, env, runLs, "--ca-file", ca, "--json")
	require.Equal(t, ExitOK, code, errOut)

	delete(env, "DLQ_CA_FILE")
	for _, run := range []func([]string, cliEnv) int{runExport, runLs} {
		code, _, errOut = cliWith(t, env, run, "--status", "all")
		require.Equal(t, ExitUnavailable, code, errOut)
		require.Contains(t, errOut, "certificate")
	}
	code, _, errOut = cliWith(t, env, runImport, file)
	require.Equal(t, ExitUnavailable, code, errOut)
	require.Contains(t, errOut, "certificate")
}

// TestUnreadableTokenFileIsAUsageError: a DLQ_TOKEN_FILE that cannot be
// read is a configuration error (exit 2) naming it, in every API command,
// export and import included (they sent no token and reported
// missing_token), as in the replay commands.
func TestUnreadableTokenFileIsAUsageError(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	missing := filepath.Join(t.TempDir(), "missing-token")
	exposed := filepath.Join(t.TempDir(), "exposed-token")
	require.NoError(t, os.WriteFile(exposed, []byte(clitest.AdminToken), 0o644))
	for _, path := range []string{missing, exposed} {
		env := map[string]string{"DLQ_URL": url, "DLQ_TOKEN_FILE": path}
		for name, run := range map[string]func([]string, cliEnv) int{"ls": runLs, "status": runStatus, "export": runExport,
			"ack": runActionCmd("ack")} {
			args := []string{"--status", "all"}
			if name == "status" {
				args = nil
			}
			code, out, errOut := cliWith(t, env, run, args...)
			require.Equal(t, ExitUsage, code, "dlq %s with DLQ_TOKEN_FILE=%s: %s%s", name, path, out, errOut)
			require.Contains(t, errOut, "DLQ_TOKEN_FILE: secret file "+path)
			require.Contains(t, errOut, "or set DLQ_TOKEN instead")
			require.NotContains(t, errOut, "missing_token")
		}
		in := filepath.Join(t.TempDir(), "in.ndjson")
		require.NoError(t, os.WriteFile(in, []byte(`{"id":1}`+"\n"), 0o600))
		code, _, errOut := cliWith(t, env, runImport, in)
		require.Equal(t, ExitUsage, code, errOut)
		require.Contains(t, errOut, "DLQ_TOKEN_FILE")
	}
}

// TestUnusableCAFileIsAUsageError: a --ca-file (DLQ_CA_FILE) that is
// missing or holds no certificate stops every API command with exit 2
// naming the file, before any request; it used to print a warning and go
// on with the system's CAs, ending in a certificate error that hid why.
func TestUnusableCAFileIsAUsageError(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	missing := filepath.Join(t.TempDir(), "missing-ca.pem")
	notPEM := filepath.Join(t.TempDir(), "not-a-ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600))
	for _, path := range []string{missing, notPEM} {
		env := map[string]string{"DLQ_URL": url, "DLQ_TOKEN": clitest.AdminToken, "DLQ_CA_FILE": path}
		for name, run := range map[string]func([]string, cliEnv) int{"ls": runLs, "export": runExport, "ack": runActionCmd("ack")} {
			code, out, errOut := cliWith(t, env, run, "--status", "all")
			require.Equal(t, ExitUsage, code, "dlq %s with DLQ_CA_FILE=%s: %s%s", name, path, out, errOut)
			require.Contains(t, errOut, "--ca-file (DLQ_CA_FILE) \""+path+"\"")
			require.NotContains(t, errOut, "certificate signed by unknown authority")
		}
		code, _, errOut := cliWith(t, nil, runLs, "--url", url, "--token", clitest.AdminToken, "--ca-file", path)
		require.Equal(t, ExitUsage, code, errOut)
		require.Contains(t, errOut, path)
	}
}

// TestAnswerExitMatchesTheHTTPAPI: a control-queue answer exits with the
// code of the HTTP API's answer to the same failure: 3 (retry later) for
// rate_limited (429), internal (500) and unavailable (503).
func TestAnswerExitMatchesTheHTTPAPI(t *testing.T) {
	t.Parallel()
	c := &apiClient{name: "test", env: cliEnv{stdout: io.Discard, stderr: io.Discard}}
	for code, status := range map[string]int{
		control.CodeRateLimited:     http.StatusTooManyRequests,
		control.CodeInternal:        http.StatusInternalServerError,
		control.CodeUnavailable:     http.StatusServiceUnavailable,
		control.CodeNotFound:        http.StatusNotFound,
		control.CodeForbidden:       http.StatusForbidden,
		control.CodeInvalidToken:    http.StatusUnauthorized,
		control.CodeMissingToken:    http.StatusUnauthorized,
		control.CodeInvalidRequest:  http.StatusBadRequest,
		control.CodeConfirmRequired: http.StatusBadRequest,
		control.CodeConflict:        http.StatusConflict,
	} {
		require.Equal(t, c.fail(&apiError{status: status, code: code}), answerExit(code), "control answer %s vs HTTP %d", code, status)
	}
	require.Equal(t, ExitUnavailable, answerExit(control.CodeRateLimited))
	require.Equal(t, ExitUnavailable, answerExit(control.CodeInternal))
}
