package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// exportAt runs dlq export against url with the clock at now.
func exportAt(url string, now time.Time, args ...string) (int, string) {
	var out, errOut bytes.Buffer
	vars := map[string]string{"DLQ_URL": url, "DLQ_TOKEN": clitest.AdminToken}
	env := cliEnv{getenv: func(k string) string { return vars[k] }, stdout: &out, stderr: &errOut, now: func() time.Time { return now }}
	return runExport(args, env), errOut.String()
}

// exportedMessageIDs reads the message ids of an export file's lines, in order.
func exportedMessageIDs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var ids []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var line struct {
			MessageID *string `json:"message_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &line), "%s", l)
		if line.MessageID != nil {
			ids = append(ids, *line.MessageID)
		}
	}
	return ids
}

// An export with --after 24h, cut, then resumed an hour later: measuring
// 24h again would leave out the messages of the window's first hour, so a
// duration is refused (the file left as it is), and the times the export
// measured, which it printed, continue it with every message it selects.
func TestExportResumeKeepsTheTimeRange(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	batch := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	// Oldest id first; the export reads newest first: late, mid, early.
	for i, m := range []struct {
		id  string
		ago time.Duration
	}{{"outside", 30 * time.Hour}, {"early", 23*time.Hour + 30*time.Minute}, {"mid", 2 * time.Hour}, {"late", time.Hour}} {
		at := t0.Add(-m.ago)
		batch.Messages = append(batch.Messages, store.NewMessage{MessageID: m.id, SourceQueue: "orders", DeadLetterQueue: "dlq",
			Reason: "rejected", DeathCount: 1, Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`),
			Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), FirstFailedAt: at, FailedAt: at, Fingerprint: int64(i + 1)})
	}
	_, err := st.IngestBatch(context.Background(), batch)
	require.NoError(t, err)
	url := clitest.Serve(t, st, nil)
	dir := t.TempDir()
	measured := "--after " + t0.Add(-24*time.Hour).Format(time.RFC3339)

	full := filepath.Join(dir, "full.ndjson")
	code, errOut := exportAt(url, t0, "--after", "24h", "--output", full)
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, []string{"late", "mid", "early"}, exportedMessageIDs(t, full))

	// Cut after its first message; it says which time to resume with.
	cut := filepath.Join(dir, "cut.ndjson")
	code, errOut = exportAt(clitest.CuttingProxy(t, url, 1), t0, "--after", "24h", "--output", cut)
	require.Equal(t, ExitUnavailable, code, errOut)
	require.Contains(t, errOut, "--after 24h is "+measured)
	require.Contains(t, errOut, "run the same command with --resume and "+measured)
	before, err := os.ReadFile(cut)
	require.NoError(t, err)

	// An hour later, 24h ago is another time: refused, the file untouched.
	code, errOut = exportAt(url, t0.Add(time.Hour), "--after", "24h", "--output", cut, "--resume")
	require.Equal(t, ExitUsage, code, errOut)
	require.Contains(t, errOut, "--resume: --after 24h would be measured from now")
	after, err := os.ReadFile(cut)
	require.NoError(t, err)
	require.Equal(t, before, after)

	// With the time the export measured: every message, once.
	code, errOut = exportAt(url, t0.Add(time.Hour), strings.Fields(measured+" --output "+cut+" --resume")...)
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, []string{"late", "mid", "early"}, exportedMessageIDs(t, cut))

	// A file that holds no message yet has nothing to keep in step with.
	fresh := filepath.Join(dir, "fresh.ndjson")
	code, errOut = exportAt(url, t0, "--after", "24h", "--output", fresh, "--resume")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, []string{"late", "mid", "early"}, exportedMessageIDs(t, fresh))
}

// A cut export of one queue resumed under another would end "complete"
// holding both (the cursor is a message id, not bound to the filter): it is
// refused (exit 2), the file left as it is. Resumed with the flags it began
// with, or with none (the selection recorded beside it), it completes with
// that queue's messages only, and the record goes with the cut.
func TestExportResumeKeepsTheSelection(t *testing.T) {
	t.Parallel()
	st, _, _ := clitest.Seeded(t) // m-0 to m-3 in orders, m-4 and m-5 (newest) in billing
	url := clitest.Serve(t, st, nil)
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		existed bool // the cut part goes to FILE.partial, else to FILE
		resume  []string
		note    string
	}{
		{"same flags", true, []string{"--queue", "billing"}, ""},
		{"no filter flags", false, nil, "with the selection it was cut with"},
	} {
		file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".ndjson")
		part := file
		if tc.existed {
			require.NoError(t, os.WriteFile(file, nil, 0o644))
			part = file + ".partial"
		}
		code, _, errOut := cli(t, clitest.CuttingProxy(t, url, 1), clitest.AdminToken, runExport, "--queue", "billing", "--output", file)
		require.Equal(t, ExitUnavailable, code, "%s: %s", tc.name, errOut)
		require.Equal(t, []string{"m-5"}, exportedMessageIDs(t, part), tc.name)
		before, err := os.ReadFile(part)
		require.NoError(t, err)

		code, _, errOut = cli(t, url, clitest.AdminToken, runExport, "--queue", "orders", "--resume", "--output", part)
		require.Equal(t, ExitUsage, code, "%s: %s", tc.name, errOut)
		require.Contains(t, errOut, "was cut exporting --queue billing", tc.name)
		require.Contains(t, errOut, "not --queue orders", tc.name)
		require.Contains(t, errOut, "resume with the flags it began with", tc.name)
		require.Contains(t, errOut, "start a new export", tc.name)
		after, err := os.ReadFile(part)
		require.NoError(t, err)
		require.Equal(t, string(before), string(after), "%s: the refused resume leaves the file as it was", tc.name)

		code, _, errOut = cli(t, url, clitest.AdminToken, runExport, append(tc.resume, "--resume", "--output", part)...)
		require.Equal(t, ExitOK, code, "%s: %s", tc.name, errOut)
		require.Contains(t, errOut, "(2 in the file)", tc.name)
		require.Contains(t, errOut, tc.note, tc.name)
		require.Equal(t, []string{"m-5", "m-4"}, exportedMessageIDs(t, part), tc.name)
		_, err = os.Stat(part + ".selection")
		require.ErrorIs(t, err, os.ErrNotExist, "%s: a complete export records no selection", tc.name)
	}
}

// A selection is recorded and compared without the cursor and with the
// --field conditions in one order, and named as the flags that select it.
func TestExportSelectionWords(t *testing.T) {
	t.Parallel()
	a := normalSelection(map[string][]string{"source_queue": {"orders"}, "field": {"b<2", "a=1"}, "cursor": {"9"}})
	b := normalSelection(map[string][]string{"field": {"a=1", "b<2"}, "source_queue": {"orders"}})
	require.Equal(t, a, b)
	require.Equal(t, "--queue orders --field a=1 --field 'b<2'", selectionFlags(a))
	require.Equal(t, "--q 'it'\\''s down' --replay-task 3", selectionFlags("replay_task=3&q=it%27s+down"))
	require.Equal(t, "no filter flags", selectionFlags(""))
}

// Selections the API reads as one compare equal, and only those: no status
// is the API's default, pending; lists in any order, spaced or repeated;
// every status is all; --field conditions as the API parses them. An
// empty parameter is an absent one, and the API reads a parameter by its
// first value.
func TestNormalSelection(t *testing.T) {
	t.Parallel()
	type q = map[string][]string
	for _, same := range [][]q{
		{{}, {"status": {"pending"}}, {"status": {" pending "}}, {"status": {"pending,pending"}}, {"status": {""}}, {"cursor": {"7"}}},
		{{"source_queue": {"orders"}}, {"source_queue": {"orders"}, "status": {"pending"}}, {"source_queue": {"orders", "billing"}}},
		{{"status": {"replayed,pending"}}, {"status": {"pending, replayed"}}, {"status": {"replayed,pending,replayed"}}},
		{{"status": {"all"}}, {"status": {" all"}}, {"status": {"acknowledged,replayed,replaying,pending"}}},
		{{"category": {"transient,permanent"}}, {"category": {"permanent, transient"}}},
		{{"field": {"a=1", "b<2"}}, {"field": {"b<2", "a = 1", "a=1"}}, {"field": {`\a=1`, "b<2"}}},
		{{"q": {"down"}}, {"q": {"down"}, "reason": {""}, "group": {""}}},
	} {
		for _, other := range same[1:] {
			require.Equal(t, normalSelection(url.Values(same[0])), normalSelection(url.Values(other)), "%v and %v select the same", same[0], other)
		}
	}
	for _, differ := range [][2]q{
		{{}, {"status": {"all"}}},
		{{"status": {"pending"}}, {"status": {"pending,replayed"}}},
		{{"status": {"pending,bogus"}}, {"status": {"pending"}}}, // refused, not taken for pending
		{{"status": {"replayed,replaying,pending"}}, {"status": {"all"}}},
		{{}, {"category": {"transient,permanent,unknown"}}}, // nothing keeps a stored category to the three
		{{"category": {"transient"}}, {"category": {"permanent"}}},
		{{"field": {"a=1"}}, {"field": {"a=1", "b=2"}}},
		{{"field": {"a=1"}}, {"field": {"a=01"}}},
		{{"replay_task": {"3"}}, {"replay_task": {"3"}, "replay_outcome": {"failed"}}},
	} {
		require.NotEqual(t, normalSelection(url.Values(differ[0])), normalSelection(url.Values(differ[1])), "%v and %v differ", differ[0], differ[1])
	}
	// The normal form is a query the API reads as the selection it stands for.
	require.Equal(t, "category=permanent%2Ctransient&field=a%3D1&status=all",
		normalSelection(url.Values{"status": {"pending,replaying,replayed,acknowledged"}, "category": {"transient , permanent"}, "field": {"a = 1"}}))
}

// --status pending is what no --status selects (the API's default), so a
// cut export resumes under either, both ways round; --status all is
// another selection, and still refused.
func TestExportResumeTakesTheDefaultStatus(t *testing.T) {
	t.Parallel()
	st, _, _ := clitest.Seeded(t) // m-4 and m-5 (newest) in billing
	url := clitest.Serve(t, st, nil)
	dir := t.TempDir()
	for i, tc := range []struct{ cut, resume []string }{
		{[]string{"--queue", "billing"}, []string{"--queue", "billing", "--status", "pending"}},
		{[]string{"--status", "pending", "--queue", "billing"}, []string{"--queue", "billing"}},
	} {
		file := filepath.Join(dir, fmt.Sprintf("%d.ndjson", i))
		code, _, errOut := cli(t, clitest.CuttingProxy(t, url, 1), clitest.AdminToken, runExport, append(tc.cut, "--output", file)...)
		require.Equal(t, ExitUnavailable, code, "%v: %s", tc.cut, errOut)

		code, _, errOut = cli(t, url, clitest.AdminToken, runExport, "--queue", "billing", "--status", "all", "--resume", "--output", file)
		require.Equal(t, ExitUsage, code, "%v: %s", tc.cut, errOut)
		require.Contains(t, errOut, "was cut exporting --queue billing (recorded in", "%v", tc.cut)
		require.Contains(t, errOut, "not --queue billing --status all", "%v", tc.cut)

		code, _, errOut = cli(t, url, clitest.AdminToken, runExport, append(tc.resume, "--resume", "--output", file)...)
		require.Equal(t, ExitOK, code, "cut with %v, resumed with %v: %s", tc.cut, tc.resume, errOut)
		require.Equal(t, []string{"m-5", "m-4"}, exportedMessageIDs(t, file), "%v", tc.cut)
	}
}
