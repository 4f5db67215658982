package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLabelize: the errors of a refused filter name the form's fields,
// not the API's parameters, and leave other words alone.
func TestLabelize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Invalid: invalid filter: failed_after (2024-05-02T00:00:00Z) must be before failed_before (2024-05-01T00:00:00Z)": "Invalid: Failed after (2024-05-02T00:00:00Z) must be before Failed before (2024-05-01T00:00:00Z)",
		"Invalid: failed_after: must be a time such as 2024-05-01T12:00 (UTC) or RFC 3339":                                 "Invalid: Failed after: must be a time such as 2024-05-01T12:00 (UTC) or RFC 3339",
		`Invalid: invalid filter: category "flaky" must be one of transient, permanent, unknown`:                           `Invalid: Category "flaky" must be one of transient, permanent, unknown`,
		"Invalid: q must have at least 3 characters":                                                                       "Invalid: Search must have at least 3 characters",
		"Invalid: field: a field filter needs a bound: add source_queue, failed_after, group or q":                         "Invalid: JSON body field: a field filter needs a bound: add Source queue, Failed after, Failure group or Search",
		"Refused: token ops may not see queue orders":                                                                      "Refused: token ops may not see queue orders",
		"Invalid: a group id is 16 hex digits; the status of the queue":                                                    "Invalid: a group id is 16 hex digits; the status of the queue",
	} {
		require.Equal(t, want, labelize(in), in)
	}
}

// TestSnippet: a search's row shows where q matched, the phrase first,
// else its longest word, with the text around it on one line.
func TestSnippet(t *testing.T) {
	t.Parallel()
	require.Equal(t, &snippet{Before: "payment ", Match: "DECLINED by issuer", After: " for card …"},
		cut("payment DECLINED by issuer for card …", "declined by issuer"))
	require.Nil(t, cut("nothing here", "declined"))
	long := cut(string(make([]byte, 0))+"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nline two INV-42 more", "inv-42")
	require.Equal(t, "INV-42", long.Match)
	require.True(t, len([]rune(long.Before)) <= snippetContext+1)
	require.Contains(t, long.Before, " line two ", "white space folded to one line")
	require.Equal(t, []string{"order A-1 shipped", "shipped", "order", "A-1"}, searchTerms("order A-1 shipped*"))
}

// TestLineDiff: the lines removed and added between two texts, the same
// lines kept near a change and folded far from one.
func TestLineDiff(t *testing.T) {
	t.Parallel()
	a := "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3,\n  \"d\": 4,\n  \"e\": 5,\n  \"f\": 6,\n  \"g\": 7,\n  \"h\": 8\n}"
	b := "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3,\n  \"d\": 4,\n  \"e\": 50,\n  \"f\": 6,\n  \"g\": 7,\n  \"h\": 8,\n  \"i\": 9\n}"
	got := lineDiff(a, b)
	var ops []string
	for _, l := range got {
		ops = append(ops, string(l.Op)+l.Text)
	}
	require.Equal(t, []string{"~… 2 unchanged lines", `   "b": 2,`, `   "c": 3,`, `   "d": 4,`, `-  "e": 5,`, `+  "e": 50,`, `   "f": 6,`, `   "g": 7,`,
		`-  "h": 8`, `+  "h": 8,`, `+  "i": 9`, " }"}, ops)
	require.Len(t, lineDiff("same", "same"), 1)
}

// TestWhen: every time is shown one way, in UTC, with how long ago or how
// soon beside it.
func TestWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		2 * time.Second: "just now", 45 * time.Second: "45 s ago", 5 * time.Minute: "5 min ago", 3 * time.Hour: "3 h ago",
		47 * time.Hour: "47 h ago", 72 * time.Hour: "3 days ago", 24 * 400 * time.Hour: "400 days ago", -20 * time.Hour: "in 20 h",
		// A time to come, rounded rather than cut: a request that
		// expires in 24 h, seen 6 s later, is not "in 23 h".
		-(24*time.Hour - 6*time.Second): "in 24 h", -(59*time.Minute + 40*time.Second): "in 1 h",
		-(4*time.Minute + 50*time.Second): "in 5 min", -(47*time.Hour + 40*time.Minute): "in 2 days", -(90 * time.Minute): "in 2 h",
		-(80 * time.Minute): "in 1 h",
	} {
		require.Equal(t, want, relative(now.Add(-d), now), d)
	}
	got := whenHTML(time.Date(2024, 5, 1, 13, 55, 0, 0, time.FixedZone("CEST", 2*3600)), now)
	require.Equal(t, `<time datetime="2024-05-01T11:55:00Z"><span class="date">2024-05-01</span> 11:55:00 UTC</time> <span class="ago">(5 min ago)</span>`, string(got))
	require.Equal(t, "–", string(whenHTML(time.Time{}, now)))
	require.Equal(t, "1 matching message", plural(1, "matching message", "matching messages"))
	require.Equal(t, "1,200 matching messages", plural(1200, "matching message", "matching messages"))
}
