package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
)

// importGlob runs `dlq import DIR/*` in a shell, as an operator types it,
// against url: the shell, not the test, expands the glob.
func importGlob(t *testing.T, bin, url, dir string) (int, string, string) {
	t.Helper()
	return importShell(t, bin, url, dir, `"$DLQ_BIN" import "$EXPORTS"/*`)
}

// importPipe runs `cat DIR/* | dlq import ARGS` in a shell: the exports
// of a directory, one after another on import's stdin.
func importPipe(t *testing.T, bin, url, dir string, args ...string) (int, string, string) {
	t.Helper()
	return importShell(t, bin, url, dir, `cat "$EXPORTS"/* | "$DLQ_BIN" import `+strings.Join(args, " "))
}

// importShell runs script, a shell command line that runs "$DLQ_BIN"
// import on the exports in "$EXPORTS" (dir), against url.
func importShell(t *testing.T, bin, url, dir, script string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Env = append(os.Environ(), "DLQ_BIN="+bin, "EXPORTS="+dir, "DLQ_URL="+url, "DLQ_TOKEN="+clitest.AdminToken, "DLQ_ADMIN_TOKEN=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err, "sh -c %s (EXPORTS=%s)", script, dir)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// storedMessageIDs lists the message ids a dlq holds, in every status, sorted.
func storedMessageIDs(t *testing.T, bin, url string) []string {
	t.Helper()
	code, out, errOut := execDLQ(t, bin, url, clitest.AdminToken, "ls", "--status", "all", "--limit", "1000", "--json")
	require.Equal(t, cli.ExitOK, code, errOut)
	var page struct {
		Messages []struct {
			MessageID string `json:"message_id"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	var ids []string
	for _, m := range page.Messages {
		ids = append(ids, m.MessageID)
	}
	slices.Sort(ids)
	return ids
}

// cutExportBesideComplete exports two queues of a seeded dlq (m-0 to m-3
// in orders, m-4 and m-5 in billing) into dir: a.ndjson, orders, cut after
// its first message (m-3), with its selection record beside it, and
// b.ndjson, billing, complete. It returns the binary, the source's and an
// empty destination's addresses, dir and a.ndjson's path.
func cutExportBesideComplete(t *testing.T) (bin, from, to, dir, a string) {
	t.Helper()
	bin = dlqBinary(t)
	src, _, _ := clitest.Seeded(t)
	from = clitest.Serve(t, src, nil)
	dst, _ := dlqtest.Store(t)
	to = clitest.Serve(t, dst, nil)
	dir = t.TempDir()
	a, b := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson")
	code, _, errOut := execDLQ(t, bin, clitest.CuttingProxy(t, from, 1), clitest.AdminToken, "export", "--queue", "orders", "--output", a)
	require.Equal(t, cli.ExitUnavailable, code, errOut)
	require.FileExists(t, a+".selection")
	code, _, errOut = execDLQ(t, bin, from, clitest.AdminToken, "export", "--queue", "billing", "--output", b)
	require.Equal(t, cli.ExitOK, code, errOut)
	return bin, from, to, dir, a
}

// A cut export's selection record lies beside it, so `dlq import
// exports/*` names it: import skips it, saying so on one line, and imports
// the exports around it (the record once stopped the command at its first
// line, before the exports after it). Once the export is resumed (and its
// record gone), the same command imports the rest: every message once.
func TestImportGlobSkipsTheSelectionRecord(t *testing.T) {
	t.Parallel()
	bin, from, to, dir, a := cutExportBesideComplete(t)

	code, out, errOut := importGlob(t, bin, to, dir)
	require.Equal(t, cli.ExitFailure, code, "a.ndjson is a cut export: %s%s", out, errOut)
	require.Contains(t, errOut, "dlq import: skipping "+a+".selection: not an export but the selection dlq export recorded for the cut export a.ndjson")
	require.Equal(t, 1, strings.Count(errOut, ".selection"), "one line about the record: %s", errOut)
	require.Contains(t, errOut, a+" has no end line")
	require.Equal(t, "3 messages imported, 0 skipped (stored before)\n", out)
	require.Equal(t, []string{"m-3", "m-4", "m-5"}, storedMessageIDs(t, bin, to))

	code, _, errOut = execDLQ(t, bin, from, clitest.AdminToken, "export", "--resume", "--output", a)
	require.Equal(t, cli.ExitOK, code, errOut)
	require.NoFileExists(t, a+".selection")
	code, out, errOut = importGlob(t, bin, to, dir)
	require.Equal(t, cli.ExitOK, code, errOut)
	require.NotContains(t, errOut, "skipping")
	require.Equal(t, "3 messages imported, 3 skipped (stored before)\n", out)
	require.Equal(t, []string{"m-0", "m-1", "m-2", "m-3", "m-4", "m-5"}, storedMessageIDs(t, bin, to))
}

// `cat exports/* | dlq import` streams the selection record beside a cut
// export in among the exports' lines: import skips its two lines, saying
// so on one line, and imports every message around them (the record once
// ended the command as a refused line, and nothing of its request was
// stored). The lines before the record have no end line: a cut export,
// which the command names as it names a cut file, and exits 1. Requests of
// --batch 2 lines split the stream around the record, and a refused line
// after it is still reported by its line number in the stream.
func TestImportStreamSkipsTheSelectionRecord(t *testing.T) {
	t.Parallel()
	bin, from, to, dir, a := cutExportBesideComplete(t)
	// The stream: a (line 1), a.ndjson.selection (2-3), b (4-6).

	// A refused line after the record is named by its line in the stream.
	bad := t.TempDir()
	for _, f := range []string{a, a + ".selection"} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(bad, filepath.Base(f)), data, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(bad, "c.ndjson"), []byte("not an export\n"), 0o644))
	code, out, errOut := importPipe(t, bin, to, bad, "--batch", "2")
	require.Equal(t, cli.ExitUsage, code, "%s%s", out, errOut)
	require.Contains(t, errOut, "dlq import: -:4: not a JSON export line")
	require.Contains(t, errOut, "nothing of lines 3-4 was stored; 1 imported, 0 skipped before them")
	require.Equal(t, []string{"m-3"}, storedMessageIDs(t, bin, to))

	code, out, errOut = importPipe(t, bin, to, dir, "--batch", "2")
	require.Equal(t, cli.ExitFailure, code, "a.ndjson is a cut export: %s%s", out, errOut)
	require.Contains(t, errOut, "dlq import: skipping -:2-3: not an export but the selection dlq export recorded for the cut export a.ndjson, which dlq export --resume reads\n")
	require.Equal(t, 1, strings.Count(errOut, "skipping"), "one line about the record: %s", errOut)
	require.Contains(t, errOut, "dlq import: -:1 (the export before the selection record) has no end line")
	require.NotContains(t, errOut, "dlq import: - has no end line", "the stream ends with b's end line: %s", errOut)
	require.Equal(t, "2 messages imported, 1 skipped (stored before)\n", out)
	require.Equal(t, []string{"m-3", "m-4", "m-5"}, storedMessageIDs(t, bin, to))

	// `dlq import -` reads stdin the same way.
	code, out, errOut = importPipe(t, bin, to, dir, "-")
	require.Equal(t, cli.ExitFailure, code, "%s%s", out, errOut)
	require.Contains(t, errOut, "dlq import: skipping -:2-3: not an export but the selection")
	require.Equal(t, "0 messages imported, 3 skipped (stored before)\n", out)

	code, _, errOut = execDLQ(t, bin, from, clitest.AdminToken, "export", "--resume", "--output", a)
	require.Equal(t, cli.ExitOK, code, errOut)
	require.NoFileExists(t, a+".selection")
	code, out, errOut = importPipe(t, bin, to, dir)
	require.Equal(t, cli.ExitOK, code, errOut)
	require.NotContains(t, errOut, "skipping")
	require.Equal(t, "3 messages imported, 3 skipped (stored before)\n", out)
	require.Equal(t, []string{"m-0", "m-1", "m-2", "m-3", "m-4", "m-5"}, storedMessageIDs(t, bin, to))
}
