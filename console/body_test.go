package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

func TestViewBody(t *testing.T) {
	t.Parallel()
	b := func(s string) *[]byte { x := []byte(s); return &x }

	v := viewBody(nil, 42, "")
	require.True(t, v.Hidden)
	require.EqualValues(t, 42, v.Size)

	v = viewBody(b(`{"a":[1,2],"b":"<script>"}`), 0, "")
	require.Equal(t, "json", v.Kind)
	require.Equal(t, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"<script>\"\n}", v.Text)
	require.False(t, v.Truncated())

	v = viewBody(b("plain text\nline two\ttab"), 0, "")
	require.Equal(t, "text", v.Kind)
	require.Equal(t, "plain text\nline two\ttab", v.Text)

	v = viewBody(b("\x00\x01binary\xff"), 0, "")
	require.Equal(t, "binary", v.Kind)
	require.Contains(t, v.Text, "00 01 62 69 6e 61 72 79  ff")

	v = viewBody(b(`{"gzip":"bytes"}`), 0, "gzip")
	require.Equal(t, "binary", v.Kind, "encoded bytes are not the text they encode")

	deep := `[` + strings.Repeat(`[1,`, 2000) + `1` + strings.Repeat(`]`, 2000) + `]`
	v = viewBody(b(deep), 0, "")
	require.Equal(t, "json", v.Kind, "JSON whose formatting passes the cap is formatted up to it")
	require.True(t, v.Truncated())
	require.LessOrEqual(t, len(v.Text), bodyTextCap)

	// A large JSON body (1.9 MiB) shows its beginning formatted, cut
	// inside a string value without breaking: no error, no split rune.
	var large strings.Builder
	large.WriteString(`{"items":[`)
	for i := 0; large.Len() < 1900<<10; i++ {
		if i > 0 {
			large.WriteByte(',')
		}
		large.WriteString(`{"id":` + strconv.Itoa(i) + `,"note":"crème brûlée ` + strings.Repeat("x", i%50) + `","tags":[],"meta":{}}`)
	}
	large.WriteString(`]}`)
	v = viewBody(b(large.String()), 0, "")
	require.Equal(t, "json", v.Kind)
	require.True(t, v.Truncated())
	require.LessOrEqual(t, len(v.Text), bodyTextCap)
	require.Greater(t, len(v.Text), bodyTextCap-100, "formatted up to the cap")
	require.True(t, strings.HasPrefix(v.Text, "{\n  \"items\": [\n    {\n      \"id\": 0,\n      \"note\": \"crème brûlée \",\n      \"tags\": [],\n      \"meta\": {}\n    },"), v.Text[:200])
	require.True(t, utf8.ValidString(v.Text))
	require.EqualValues(t, len(large.String()), v.Size)

	big := strings.Repeat("é", bodyTextCap) // two bytes each
	v = viewBody(b(big), 0, "")
	require.Equal(t, "text", v.Kind)
	require.True(t, v.Truncated())
	require.EqualValues(t, bodyTextCap, v.Shown, "cut on a rune boundary")
	require.EqualValues(t, 2*bodyTextCap, v.Size)

	bin := make([]byte, 3*bodyHexCap)
	v = viewBody(&bin, 0, "")
	require.EqualValues(t, bodyHexCap, v.Shown)
	require.Less(t, len(v.Text), 40*1024, "a capped hex dump keeps the page small")
}

func TestViewFields(t *testing.T) {
	t.Parallel()
	rows := viewFields(json.RawMessage(`{
		"s": "<img src=x onerror=alert(1)>", "b": true, "nil": null, "n": {"type": "int32", "value": 7},
		"ts": {"type": "timestamp", "value": "2024-05-01T00:00:00Z"}, "dec": {"type": "decimal", "value": {"scale": 2, "value": 1234}},
		"tbl": {"a": 1}, "arr": [1, "x"], "raw": {"type": "int32", "value": 1, "extra": 2}}`))
	got := map[string]field{}
	for _, r := range rows {
		got[r.Name] = r
	}
	require.Equal(t, field{"s", "string", "<img src=x onerror=alert(1)>"}, got["s"])
	require.Equal(t, field{"b", "boolean", "true"}, got["b"])
	require.Equal(t, field{"nil", "void", "null"}, got["nil"])
	require.Equal(t, field{"n", "int32", "7"}, got["n"])
	require.Equal(t, field{"ts", "timestamp", "2024-05-01T00:00:00Z"}, got["ts"])
	require.Equal(t, field{"dec", "decimal", `{"scale":2,"value":1234}`}, got["dec"])
	require.Equal(t, field{"tbl", "table", `{"a":1}`}, got["tbl"])
	require.Equal(t, field{"arr", "array", `[1,"x"]`}, got["arr"])
	require.Equal(t, "table", got["raw"].Type, "an object with other keys is a table")
	require.Equal(t, "arr", rows[0].Name, "sorted by name")
	require.Nil(t, viewFields(nil))
}

// TestViewTimeline: each death is taken hop by hop from x-death (the
// queue the message died in, never dlq's own queue), an earlier death
// from death_history (with its own hops when recorded, else in the
// message's source queue), replays and the edit beside them, oldest
// first.
func TestViewTimeline(t *testing.T) {
	t.Parallel()
	day := func(d int) time.Time { return time.Date(2024, 5, d, 0, 0, 0, 0, time.UTC) }
	m := store.Message{ID: 7, SourceQueue: "orders", FailedAt: day(4), Reason: "rejected", DeadLetterQueue: "dlq", DeathCount: 1,
		Failure: json.RawMessage(`{"type":"E","message":"now"}`),
		// The current death: rejected 3 times in orders.retry's consumer, then expired in orders.
		XDeath: json.RawMessage(`[{"queue":"orders","reason":"expired","count":1,"exchange":"","routing_keys":["orders"],"time":"2024-05-04T00:00:00Z"},
			{"queue":"orders.work","reason":"rejected","count":3,"exchange":"app","routing_keys":["o"],"time":"2024-05-03T12:00:00Z"}]`),
		DeathHistory: json.RawMessage(`[{"failed_at":"2024-05-01T00:00:00Z","reason":"expired","death_count":3,"dead_letter_queue":"dlq","failure_type":"E","failure_message":"then"},
			{"failed_at":"2024-05-02T00:00:00Z","reason":"rejected","death_count":1,"dead_letter_queue":"dlq","failure_type":"E","failure_message":"again",
			 "x_death":[{"queue":"orders.work","reason":"rejected","count":1,"time":"2024-05-02T00:00:00Z"}]}]`),
		Edited: &store.MessageEdit{TaskID: 12, EditedAt: day(5), EditedBy: "alice"}}
	replays := []ops.MessageReplay{
		{Task: replay.Task{ID: 12, CreatedAt: day(5)}, Outcome: "published"},
		{Task: replay.Task{ID: 9, CreatedAt: day(3)}, Outcome: "published"},
		{Task: replay.Task{ID: 8, CreatedAt: day(1).Add(time.Hour)}, Outcome: "published"},
	}
	tl := viewTimeline(m, replays)
	type row struct{ kind, queue, reason, msg string }
	var got []row
	for _, e := range tl {
		r := row{kind: e.Kind, queue: e.Queue, reason: e.Reason, msg: e.FailureMessage}
		if e.Replay != nil {
			r.queue = strconv.FormatInt(e.Replay.Task.ID, 10)
		}
		got = append(got, r)
	}
	require.Equal(t, []row{
		{"death", "orders", "expired", "then"}, // recorded without hops: the source queue
		{"replay", "8", "", ""},
		{"death", "orders.work", "rejected", "again"},
		{"replay", "9", "", ""},
		{"death", "orders.work", "rejected", ""}, // the older hop of the current death
		{"death", "orders", "expired", "now"},    // the hop that brought it to dlq
		{"edit", "", "", ""},                     // task 12 is the edit, not a replay row
	}, got)
	require.EqualValues(t, 3, tl[4].Count, "x-death's count of the hop")
	require.True(t, tl[5].Latest)
	require.False(t, tl[2].Latest)

	// Without x-death, the latest death is one row in the source queue.
	plain := viewTimeline(store.Message{SourceQueue: "billing", Reason: "rejected", DeadLetterQueue: "dlq", FailedAt: day(1)}, nil)
	require.Len(t, plain, 1)
	require.Equal(t, "billing", plain[0].Queue)
}

func TestArrivalsChart(t *testing.T) {
	t.Parallel()
	var counts [store.ArrivalHours]int64
	counts[0], counts[10], counts[23] = 1, 1000, 500
	c := arrivalsChart(counts, time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC))
	require.EqualValues(t, 1501, c.Total)
	require.EqualValues(t, 1000, c.Peak)
	require.Len(t, c.Bars, store.ArrivalHours)
	require.Equal(t, chartHeight, c.Bars[10].H, "the peak fills the height")
	require.Equal(t, 1, c.Bars[0].H, "an hour with arrivals never looks empty")
	require.Equal(t, 0, c.Bars[1].H)
	require.Equal(t, chartHeight/2, c.Bars[23].H)
	require.Equal(t, "May 1 10:00: 1,000", c.Bars[10].Label)
	require.Equal(t, "May 1 10:00: 1,000", c.PeakLabel)
	require.Equal(t, "M0 31h6v1h-6zM70 0h6v32h-6zM161 16h6v16h-6z", c.Path)
	empty := arrivalsChart([store.ArrivalHours]int64{}, time.Now())
	require.Zero(t, empty.Bars[5].H)
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"/ui/messages?x=1": "/ui/messages?x=1", "": "/ui/", "/api/v1/messages": "/ui/",
		"//evil": "/ui/", "/ui//evil": "/ui/", "https://evil/ui/": "/ui/", "/ui/\\evil": "/ui/"} {
		require.Equal(t, want, safeNext(in), in)
	}
}

func TestCSRFToken(t *testing.T) {
	t.Parallel()
	a, b := csrfToken("session-a"), csrfToken("session-b")
	require.NotEqual(t, a, b)
	require.Equal(t, a, csrfToken("session-a"), "every instance derives the same token")
	require.NotContains(t, a, "session-a")
	id, err := newSessionID()
	require.NoError(t, err)
	require.True(t, validSessionID(id))
	require.False(t, validSessionID("short"))
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	want := time.Date(2024, 5, 1, 12, 30, 0, 0, time.UTC)
	for _, s := range []string{"2024-05-01T12:30", "2024-05-01T12:30:00", "2024-05-01T14:30:00+02:00"} {
		got, err := parseTime("failed_after", s)
		require.NoError(t, err, s)
		require.Equal(t, want, *got, s)
	}
	_, err := parseTime("failed_after", "yesterday")
	require.ErrorContains(t, err, "failed_after")
}

// TestVendoredHTMX: the vendored script is the one its README names.
func TestVendoredHTMX(t *testing.T) {
	t.Parallel()
	js, err := os.ReadFile("static/vendor/htmx.min.js")
	require.NoError(t, err)
	readme, err := os.ReadFile("static/vendor/README.md")
	require.NoError(t, err)
	sum := sha256.Sum256(js)
	require.Contains(t, string(readme), hex.EncodeToString(sum[:]))
	require.Contains(t, string(js), `version:"2.0.4"`)
}

func TestViewDeaths(t *testing.T) {
	t.Parallel()
	m := store.Message{XDeath: json.RawMessage(`[{"queue":"orders","reason":"rejected","exchange":"","routing_keys":["orders"],"count":3,"time":"2024-05-01T00:00:00Z"}]`)}
	d := viewDeaths(m)
	require.Len(t, d, 1)
	require.Equal(t, xDeath{Queue: "orders", Reason: "rejected", RoutingKeys: []string{"orders"}, Count: 3, Time: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)}, d[0])
	require.Empty(t, viewDeaths(store.Message{}))
}

// FuzzPrettyJSON: on JSON text, prettyJSON writes what json.Indent
// writes, however it is spaced; on anything, its output never passes the
// cap, stays valid UTF-8 when the input was, and covers a prefix of it.
func FuzzPrettyJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{}],"b":"x\"y","c":null}`, `[ ]`, `{"k": {"n": -1.5e3, "t": true}}`, `{"é":"ü"}`, `{"a":`, `[1,2`, `]`, `{1}`, "\"s\"", ` [ [ ] , { } ] `} {
		f.Add([]byte(s), 64)
	}
	f.Fuzz(func(t *testing.T, in []byte, maxOut int) {
		maxOut = 1 + abs(maxOut)%4096
		out, n, ok := prettyJSON(in, maxOut)
		if n < 0 || n > len(in) {
			t.Fatalf("consumed %d of %d bytes", n, len(in))
		}
		if len(out) > maxOut {
			t.Fatalf("output of %d bytes passes the cap %d", len(out), maxOut)
		}
		if utf8.Valid(in) && !utf8.ValidString(out) {
			t.Fatalf("valid UTF-8 %q became %q", in, out)
		}
		if json.Valid(in) && n == len(in) {
			var want bytes.Buffer
			if err := json.Indent(&want, bytes.TrimSpace(in), "", "  "); err != nil {
				t.Fatal(err)
			}
			if !ok || out != want.String() {
				t.Fatalf("prettyJSON(%q) = %q, json.Indent: %q", in, out, want.String())
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
