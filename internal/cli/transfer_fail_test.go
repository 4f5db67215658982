package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
)

// An export that fails before its first message (a refused token, an
// unreachable dlq, a filter the API refuses, a stream cut at once) leaves
// the --output file there already as it was, and no temporary file.
func TestExportFailureKeepsTheFile(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "good.ndjson")
	good := []byte(`{"id":1}` + "\n" + `{"export":{"count":1,"last_id":1,"complete":true}}` + "\n")
	require.NoError(t, os.WriteFile(file, good, 0o640))

	for _, tc := range []struct {
		name, url, token string
		extra            []string
		code             int
	}{
		{"wrong token", url, "wrong", nil, ExitDenied},
		{"refused connection", "http://127.0.0.1:1", clitest.AdminToken, nil, ExitUnavailable},
		{"bad flag value", url, clitest.AdminToken, []string{"--status", "bogus"}, ExitUsage},
		{"cut before the first message", clitest.CuttingProxy(t, url, 0), clitest.AdminToken, nil, ExitUnavailable},
	} {
		args := append([]string{"--status", "all", "--output", file}, tc.extra...)
		code, _, errOut := cli(t, tc.url, tc.token, runExport, args...)
		require.Equal(t, tc.code, code, "%s: %s", tc.name, errOut)
		got, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Equal(t, string(good), string(got), tc.name)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "%s: no temporary file left", tc.name)
	}

	// A successful export replaces it, keeping its mode.
	code, _, errOut := cli(t, url, clitest.AdminToken, runExport, "--status", "all", "--output", file)
	require.Equal(t, ExitOK, code, errOut)
	ids := exportedMessageIDs(t, file)
	require.Len(t, ids, 6)
	fi, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())

	// One cut after its first messages keeps the complete export there
	// was, and puts its part beside it, where --resume finishes it.
	before, err := os.ReadFile(file)
	require.NoError(t, err)
	code, _, errOut = cli(t, clitest.CuttingProxy(t, url, 2), clitest.AdminToken, runExport, "--status", "all", "--output", file)
	require.Equal(t, ExitUnavailable, code, errOut)
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(before), string(got), "a cut export leaves the complete one as it was")
	part := file + ".partial"
	require.Contains(t, errOut, "--resume --output "+part)
	require.Len(t, exportedMessageIDs(t, part), 2)
	code, _, errOut = cli(t, url, clitest.AdminToken, runExport, "--status", "all", "--resume", "--output", part)
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, exportedMessageIDs(t, file), exportedMessageIDs(t, part))
}

// failingProxy forwards its first ok requests to upstream and drops the
// connection of every one after: a dlq that becomes unreachable midway.
func failingProxy(t *testing.T, upstream string, ok int64) string {
	t.Helper()
	u, err := url.Parse(upstream)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > ok {
			panic(http.ErrAbortHandler)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// An import whose dlq becomes unreachable between requests says how many
// messages it stored and that the same command goes on; run again, it
// stores the rest and skips what it stored.
func TestImportUnreachableMidway(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	file := filepath.Join(t.TempDir(), "all.ndjson")
	code, _, errOut := cli(t, url, clitest.AdminToken, runExport, "--status", "all", "--output", file)
	require.Equal(t, ExitOK, code, errOut)

	st2, _ := dlqtest.Store(t)
	url2 := clitest.Serve(t, st2, nil)
	code, out, errOut := cli(t, failingProxy(t, url2, 2), clitest.AdminToken, runImport, "--batch", "2", file)
	require.Equal(t, ExitUnavailable, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "cannot reach dlq")
	require.Contains(t, errOut, "4 imported, 0 skipped before line 5 of "+file)
	require.Contains(t, errOut, "Run the same command again to go on")

	code, out, errOut = cli(t, url2, clitest.AdminToken, runImport, "--batch", "2", file)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "2 messages imported, 4 skipped")
}

// A file without the end line, a cut export, is imported as far as it
// goes, and the command fails saying so and how to get the rest.
func TestImportCutExport(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "all.ndjson")
	code, _, errOut := cli(t, url, clitest.AdminToken, runExport, "--status", "all", "--output", file)
	require.Equal(t, ExitOK, code, errOut)
	full, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(full), "\n")
	cut := filepath.Join(dir, "cut.ndjson")
	require.NoError(t, os.WriteFile(cut, []byte(strings.Join(lines[:4], "")+"\n"), 0o644))

	st2, _ := dlqtest.Store(t)
	url2 := clitest.Serve(t, st2, nil)
	code, out, errOut := cli(t, url2, clitest.AdminToken, runImport, cut)
	require.Equal(t, ExitFailure, code, errOut)
	require.Contains(t, out, "4 messages imported, 0 skipped")
	require.Contains(t, errOut, cut+" has no end line")
	require.Contains(t, errOut, "--resume")
	code, out, _ = cli(t, url2, clitest.AdminToken, runImport, "--json", cut)
	require.Equal(t, ExitFailure, code)
	require.JSONEq(t, `{"imported":0,"skipped":4}`, out)

	// The whole export stores the rest, and succeeds.
	code, out, errOut = cli(t, url2, clitest.AdminToken, runImport, file)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "2 messages imported, 4 skipped")
}

// Progress is a line every interval, not one per message.
func TestTransferProgress(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	p := &transferProgress{w: &buf, cmd: "export", verb: "exported", every: 5 * time.Second,
		now: func() time.Time { return now }, next: now.Add(5 * time.Second)}
	p.tick(1, "")
	require.Empty(t, buf.String(), "not before the interval")
	now = now.Add(5 * time.Second)
	p.tick(12345, "")
	p.tick(12346, "")
	require.Equal(t, "dlq export: 12,345 messages exported so far\n", buf.String())
	require.Nil(t, newTransferProgress(&buf, "export", "exported"), "not a terminal: no progress")
	var nilProgress *transferProgress
	nilProgress.tick(1, "")
}

// An import refused for its token says it needs an admin token, not to
// run the same command again: it would be refused again.
func TestImportRefusedTokenGivesNoRetryAdvice(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	file := filepath.Join(t.TempDir(), "all.ndjson")
	code, _, errOut := cli(t, url, clitest.AdminToken, runExport, "--status", "all", "--output", file)
	require.Equal(t, ExitOK, code, errOut)

	st2, _ := dlqtest.Store(t)
	url2 := clitest.ServeWith(t, st2, nil, nil)
	code, _, errOut = cli(t, url2, clitest.OperatorToken, runImport, file)
	require.Equal(t, ExitDenied, code, errOut)
	require.Contains(t, errOut, "needs an admin token of the target dlq")
	require.NotContains(t, errOut, "Run the same command again")
}

// dlq import without a file refuses a terminal stdin rather than wait for
// an export typed in, which looks like a hang; /dev/null is no terminal.
func TestImportRefusesATerminalStdin(t *testing.T) {
	t.Parallel()
	run := func(stdin *os.File, args ...string) (int, string) {
		var out, errOut bytes.Buffer
		vars := map[string]string{"DLQ_URL": "http://127.0.0.1:1", "DLQ_TOKEN": clitest.AdminToken}
		env := cliEnv{getenv: func(k string) string { return vars[k] }, stdout: &out, stderr: &errOut, stdin: stdin}
		return runImport(args, env), errOut.String()
	}
	tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	code, errOut := run(tty)
	require.Equal(t, ExitUsage, code, errOut)
	require.Contains(t, errOut, "give the export FILE to import, or pipe it in")

	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	t.Cleanup(func() { null.Close() })
	code, errOut = run(null)
	require.NotEqual(t, ExitUsage, code, errOut)
	require.NotContains(t, errOut, "stdin is a terminal")
}
