package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// ls takes field filters and says how many messages match.
func TestCLIFieldAndTotal(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	const admin = clitest.AdminToken

	code, out, errOut := cli(t, url, admin, runLs, "--queue", "orders", "--field", "n>=1", "--field", "n!=3", "--total")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, 4, strings.Count(out, "\n"), "header, 2 messages, the total: %s", out)
	require.Contains(t, out, "2 messages match")
	code, out, _ = cli(t, url, admin, runLs, "--total")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "6 messages match")
	code, out, _ = cli(t, url, admin, runLs, "--queue", "orders", "--field", "n=2", "--total", "--json")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, `"total": {`)

	code, _, errOut = cli(t, url, admin, runLs, "--field", "n=1")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "add --queue")
	code, _, errOut = cli(t, url, admin, runLs, "--queue", "orders", "--field", "n..x=1")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "empty path segment")
	code, _, errOut = cli(t, url, clitest.ViewerToken, runLs, "--queue", "orders", "--field", "n=1")
	require.Equal(t, ExitDenied, code, errOut)

	// ack takes them too, in its JSON filter.
	code, out, errOut = cli(t, url, admin, runActionCmd("ack"), "--queue", "orders", "--field", "n=2", "--dry-run")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "dry run: 1 messages would be acknowledged")
}

// export writes every message of a filter with its end line, and resumes
// a file cut short; import stores them in another dlq once, in batches,
// names a bad line by its line number in the file, and stores the rest
// when run again.
func TestCLIExportImport(t *testing.T) {
	t.Parallel()
	url, _, _, ids := clitest.Server(t)
	const admin = clitest.AdminToken
	dir := t.TempDir()
	file := filepath.Join(dir, "all.ndjson")

	code, _, errOut := cli(t, url, admin, runExport, "--status", "all", "--output", file)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, errOut, "exported 6 messages")
	full, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(full), "\n"), "\n")
	require.Len(t, lines, 7)
	require.Contains(t, lines[6], `"export":{"count":6`)

	code, out, _ := cli(t, url, admin, runExport, "--queue", "orders", "--field", "n=2")
	require.Equal(t, ExitOK, code)
	require.Equal(t, 2, strings.Count(out, "\n"), "one message and the end line on stdout")
	code, _, _ = cli(t, url, clitest.ViewerToken, runExport, "--queue", "orders")
	require.Equal(t, ExitDenied, code, "an export holds bodies")

	// A file cut in the middle of its fourth line: --resume finishes it.
	cut := filepath.Join(dir, "cut.ndjson")
	require.NoError(t, os.WriteFile(cut, []byte(strings.Join(lines[:3], "\n")+"\n"+lines[3][:20]), 0o644))
	code, _, errOut = cli(t, url, admin, runExport, "--status", "all", "--output", cut, "--resume")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, errOut, "exported 3 messages (6 in the file)", "this run's messages and the file's")
	resumed, err := os.ReadFile(cut)
	require.NoError(t, err)
	got := strings.Split(strings.TrimSuffix(string(resumed), "\n"), "\n")
	require.Equal(t, lines[:6], got[:6], "the same messages, once each")
	require.Contains(t, got[6], `"count":3`)
	code, _, errOut = cli(t, url, admin, runExport, "--status", "all", "--output", cut, "--resume")
	require.Equal(t, ExitOK, code)
	require.Contains(t, errOut, "complete export already")

	// Into another dlq, three lines a request; twice; and gzip-compressed.
	st2, dsn2 := dlqtest.Store(t)
	db2 := dlqtest.DB(t, dsn2)
	url2 := clitest.Serve(t, st2, nil)
	code, out, errOut = cli(t, url2, admin, runImport, "--batch", "3", file)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "6 messages imported, 0 skipped")
	code, out, _ = cli(t, url2, admin, runImport, "--batch", "3", file)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "0 messages imported, 6 skipped")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, err = zw.Write(full)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	gz := filepath.Join(dir, "all.ndjson.gz")
	require.NoError(t, os.WriteFile(gz, z.Bytes(), 0o644))
	code, out, _ = cli(t, url2, admin, runImport, "--json", gz)
	require.Equal(t, ExitOK, code)
	require.JSONEq(t, `{"imported":0,"skipped":6}`, out)
	var imported int
	require.NoError(t, db2.QueryRow(context.Background(),
		`SELECT count(*) FROM dead_messages WHERE status = 'pending' AND imported_id = ANY($1)`, ids).Scan(&imported))
	require.Equal(t, 6, imported)

	// Line 5 broken: the first request (lines 1-3) is stored, the second
	// (4-6) is not, and the error names line 5 of the file.
	bad := filepath.Join(dir, "bad.ndjson")
	broken := append([]string{}, lines...)
	broken[4] = `{"id":1,"oops":true}`
	require.NoError(t, os.WriteFile(bad, []byte(strings.Join(broken, "\n")+"\n"), 0o644))
	st3, dsn3 := dlqtest.Store(t)
	db3 := dlqtest.DB(t, dsn3)
	url3 := clitest.Serve(t, st3, nil)
	code, _, errOut = cli(t, url3, admin, runImport, "--batch", "3", bad)
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, bad+":5: not an exported message")
	require.Contains(t, errOut, "nothing of lines 4-6 was stored; 3 imported")
	count := func() int {
		var n int
		require.NoError(t, db3.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages`).Scan(&n))
		return n
	}
	require.Equal(t, 3, count())
	code, out, _ = cli(t, url3, admin, runImport, "--batch", "3", file)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "3 messages imported, 3 skipped")
	require.Equal(t, 6, count())

	code, _, _ = cli(t, url3, clitest.ViewerToken, runImport, file)
	require.Equal(t, ExitDenied, code, "importing is for admins")
	code, _, _ = cli(t, url3, admin, runImport, filepath.Join(dir, "missing.ndjson"))
	require.Equal(t, ExitFailure, code)
	code, _, _ = cli(t, url3, admin, runExport, "--resume")
	require.Equal(t, ExitUsage, code)

	var page struct{ Messages []store.Message }
	code, out, _ = cli(t, url3, admin, runLs, "--json", "--limit", "1")
	require.Equal(t, ExitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.NotNil(t, page.Messages[0].ImportedFrom, "an imported message says where it comes from")
}
