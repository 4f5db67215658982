package category

import (
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLiteralSet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr string
		want []string
		fold bool
		ok   bool
	}{
		{`(?i)timeout|timed out`, []string{"timeout", "timed out"}, true, true},
		{`(?i)TimeOut`, []string{"timeout"}, true, true},
		{`deadlock|Lock wait`, []string{"deadlock", "Lock wait"}, false, true},
		{`(?i)time(d|s)? ?out`, []string{"timedout", "timesout", "timeout", "timed out", "times out", "time out"}, true, true},
		{`(?i)status code (429|503)`, []string{"status code 429", "status code 503"}, true, true},
		{`(?i)a|b|c`, []string{"a", "b", "c"}, true, true},
		{`json\.decoder`, []string{"json.decoder"}, false, true},
		// Not plain lists of words: left to the regexp engine.
		{`(?i)time.out`, nil, false, false},
		{`\b503\b`, nil, false, false},
		{`^timeout`, nil, false, false},
		{`a+`, nil, false, false},
		{`(?i)a|B|(?-i)c`, nil, false, false},
		{`(?i)é`, nil, false, false},
	} {
		got, fold, ok := literalSet(c.expr)
		require.Equal(t, c.ok, ok, c.expr)
		if !ok {
			continue
		}
		require.ElementsMatch(t, c.want, got, c.expr)
		require.Equal(t, c.fold, fold, c.expr)
	}
}

// TestMatcherAgreesWithRegexp: matching a word list as substrings gives
// exactly what the regexp engine gives, for every default and texts made
// to hit and miss them, in any case, with non-ASCII letters too.
func TestMatcherAgreesWithRegexp(t *testing.T) {
	t.Parallel()
	var exprs []string
	for _, r := range DefaultRules() {
		if r.Failure != "" {
			exprs = append(exprs, r.Failure)
		}
	}
	exprs = append(exprs, `Deadlock|lock WAIT`, `(?i)ki`, `(?i)s`)
	words := []string{"timeout", "TIMED out", "Connection Refused", "deadlock", "JsonException", "nonetype",
		"K", "\u212a", "\u017f", "s", "ki", "\u212ai", "Schema", "503", "status code 503", "é", "x", " "}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, expr := range exprs {
		m, err := compileMatcher(expr)
		require.NoError(t, err)
		re := regexp.MustCompile(expr)
		for i := 0; i < 300; i++ {
			var b strings.Builder
			for j := rng.IntN(4); j >= 0; j-- {
				w := words[rng.IntN(len(words))]
				if rng.IntN(2) == 0 {
					w = strings.ToUpper(w)
				}
				b.WriteString(w)
				if rng.IntN(2) == 0 {
					b.WriteString(" ")
				}
			}
			s := b.String()
			require.Equal(t, re.MatchString(s), m.match(newText(s, MaxMessageBytes)), "%s on %q", expr, s)
		}
	}
}

func TestDefaultsAreWordLists(t *testing.T) {
	t.Parallel()
	// Every default with a regular expression takes the fast path: a
	// default that needs the regexp engine costs ingest dearly.
	for _, r := range DefaultRules() {
		if r.Failure == "" {
			continue
		}
		_, fold, ok := literalSet(r.Failure)
		require.True(t, ok && fold, "default rule %s is not a case-insensitive list of words", r.Name)
	}
}

func TestRulesOrderAndConditions(t *testing.T) {
	t.Parallel()
	rs, err := New([]Rule{
		{Name: "billing-declined", Category: Permanent, Queues: []string{"billing"}, FailureMessage: `(?i)card declined`},
		{Name: "tenant-maintenance", Category: Transient, Headers: map[string]string{"x-tenant-state": `^maintenance$`}},
		{Name: "legacy-is-hopeless", Category: Permanent, Queues: []string{"legacy"}, Reasons: []string{"rejected"}},
		{Name: "exempt", Category: Unknown, FailureType: `^Acme\.Flaky`},
	}, true)
	require.NoError(t, err)
	header := func(h map[string]string) func(string) (string, bool) {
		return func(n string) (string, bool) { v, ok := h[n]; return v, ok }
	}
	for _, c := range []struct {
		f        Fields
		category string
		rule     string
	}{
		{Fields{SourceQueue: "billing", FailureMessage: "Card declined: timeout at bank"}, Permanent, "billing-declined"},
		{Fields{SourceQueue: "orders", FailureMessage: "Card declined: timeout at bank"}, Transient, "timeout"},
		{Fields{SourceQueue: "orders", Header: header(map[string]string{"x-tenant-state": "maintenance"})}, Transient, "tenant-maintenance"},
		{Fields{SourceQueue: "orders", Header: header(map[string]string{"x-tenant-state": "maintenance-done"})}, Unknown, ""},
		{Fields{SourceQueue: "legacy", Reason: "rejected"}, Permanent, "legacy-is-hopeless"},
		{Fields{SourceQueue: "legacy", Reason: "expired"}, Transient, "expired"},
		{Fields{FailureType: "Acme.FlakyTimeoutException"}, Unknown, "exempt"},
		{Fields{FailureType: "System.TimeoutException"}, Transient, "timeout"},
		{Fields{FailureType: "System.Text.Json.JsonException", FailureMessage: "'x' is an invalid start of a value."}, Permanent, "deserialization"},
		{Fields{FailureMessage: strings.Repeat("x", MaxMessageBytes) + " timeout"}, Unknown, ""},
		{Fields{Reason: "delivery_limit"}, Unknown, ""},
	} {
		cat, rule := rs.Match(c.f)
		require.Equal(t, c.category, cat, "%+v", c.f)
		require.Equal(t, c.rule, rule, "%+v", c.f)
	}
	require.True(t, rs.NeedsHeaders())

	var none *Rules
	require.Equal(t, Unknown, none.Of(Fields{FailureType: "TimeoutException"}))
}

func TestRulesValidate(t *testing.T) {
	t.Parallel()
	_, err := New([]Rule{
		{Name: "", Category: Transient},
		{Name: "a", Category: "flaky"},
		{Name: "a", Category: Transient, Failure: `(`},
		{Name: "b", Category: Permanent, Headers: map[string]string{"x": `[`}, Queues: []string{""}},
		{Name: "timeout", Category: Transient},
	}, true)
	require.Error(t, err)
	for _, want := range []string{
		"rules[0].name: required",
		`rules[1].category: "flaky" must be one of transient, permanent, unknown`,
		`rules[2].name: "a" is used by an earlier rule`,
		"rules[2].failure: not a regular expression",
		"rules[3].headers.x: not a regular expression",
		"rules[3].queues[0]: must not be empty",
		`default rule "timeout".name: "timeout" is used by an earlier rule`,
	} {
		require.Contains(t, err.Error(), want)
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	a, err := New(nil, true)
	require.NoError(t, err)
	b, err := New(nil, true)
	require.NoError(t, err)
	c, err := New([]Rule{{Name: "x", Category: Permanent, Queues: []string{"legacy"}}}, true)
	require.NoError(t, err)
	d, err := New(nil, false)
	require.NoError(t, err)
	require.Equal(t, a.Hash(), b.Hash())
	require.NotEqual(t, a.Hash(), c.Hash())
	require.NotEqual(t, a.Hash(), d.Hash())
	require.Len(t, a.Hash(), 16)
}

func TestHeadersJSON(t *testing.T) {
	t.Parallel()
	h := HeadersJSON([]byte(`{"s":"plain","n":{"type":"int32","value":-5},"u":{"type":"uint8","value":7},` +
		`"b":{"type":"bytes","value":"aGVsbG8="},"bad":{"type":"bytes","value":"/w=="},"t":true,` +
		`"z":{"type":"string","encoding":"base64","value":"YQBi"},"f":{"type":"float64","value":1.5},"tbl":{"k":"v"}}`))
	for name, want := range map[string]string{"s": "plain", "n": "-5", "u": "7", "b": "hello", "t": "true", "z": "a\x00b"} {
		got, ok := h(name)
		require.True(t, ok, name)
		require.Equal(t, want, got, name)
	}
	for _, name := range []string{"bad", "f", "tbl", "missing"} {
		_, ok := h(name)
		require.False(t, ok, name)
	}
	// A table that looks like a typed value, and one with keys that are
	// not text, as the codec wraps them.
	h = HeadersJSON([]byte(`{"type":"table","value":{"type":"x","value":"y"}}`))
	got, ok := h("value")
	require.True(t, ok)
	require.Equal(t, "y", got)
	h = HeadersJSON([]byte(`{"type":"table","encoding":"base64","value":{"a2V5":"v"}}`))
	got, ok = h("key")
	require.True(t, ok)
	require.Equal(t, "v", got)

	for v, want := range map[any]string{"s": "s", int8(-1): "-1", int16(2): "2", int32(3): "3", int64(4): "4", uint8(5): "5",
		uint16(6): "6", uint32(7): "7", true: "true"} {
		got, ok := HeaderText(v)
		require.True(t, ok)
		require.Equal(t, want, got)
	}
	got, ok = HeaderText([]byte("bytes"))
	require.True(t, ok)
	require.Equal(t, "bytes", got)
	_, ok = HeaderText(1.5)
	require.False(t, ok)
	_, ok = HeaderText([]byte{0xff})
	require.False(t, ok)
}

// TestDocsListEveryDefault: docs/REPLAY.md lists each default rule with
// its category.
func TestDocsListEveryDefault(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/REPLAY.md")
	require.NoError(t, err)
	doc := string(b)
	for _, r := range DefaultRules() {
		require.Contains(t, doc, "| `"+r.Name+"` | "+r.Category+" |", "docs/REPLAY.md does not list default rule %s", r.Name)
	}
}

func BenchmarkOf(b *testing.B) {
	rs, err := New(nil, true)
	require.NoError(b, err)
	fields := []Fields{
		{SourceQueue: "orders", Reason: "rejected", FailureType: "System.NullReferenceException",
			FailureMessage: "Object reference not set to an instance of an object. at Orders.Handler.Handle(OrderPlaced message) in /src/Orders/Handler.cs:line 42"},
		{SourceQueue: "orders", Reason: "rejected", FailureType: "requests.exceptions.HTTPError",
			FailureMessage: "503 Server Error: Service Unavailable for url: http://inventory/api/reserve"},
		{SourceQueue: "orders", Reason: "rejected"},
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		rs.Of(fields[i%len(fields)])
	}
}

// TestAutomatonAgreesWithRegexp: the rule set's one-pass search finds
// exactly what each rule's regular expression finds, over random texts
// made of the defaults' words, fragments of them and other words, in any
// case.
func TestAutomatonAgreesWithRegexp(t *testing.T) {
	t.Parallel()
	custom := []Rule{
		{Name: "mixed", Category: Permanent, FailureMessage: `(?i)card (declined|refused)|insufficient funds`},
		{Name: "exact", Category: Permanent, FailureType: `Acme.Broken|LegacyError`},
		{Name: "regex", Category: Transient, Failure: `(?i)\bHTTP 5\d\d\b`},
	}
	rs, err := New(custom, true)
	require.NoError(t, err)
	var words []string
	for _, r := range rs.List() {
		for _, e := range []string{r.Failure, r.FailureType, r.FailureMessage} {
			for _, w := range strings.Split(strings.TrimPrefix(e, "(?i)"), "|") {
				words = append(words, w, w[:len(w)/2], w[len(w)/2:])
			}
		}
	}
	words = append(words, "HTTP 503", "http 599", "x", " ", ".", "é", "\u212a", "Ünknown", "timeou", "imeout")
	type compiledRule struct {
		r       Rule
		f, t, m *regexp.Regexp
	}
	var ref []compiledRule
	for _, r := range rs.List() {
		c := compiledRule{r: r}
		for _, p := range []struct {
			e   string
			dst **regexp.Regexp
		}{{r.Failure, &c.f}, {r.FailureType, &c.t}, {r.FailureMessage, &c.m}} {
			if p.e != "" {
				*p.dst = regexp.MustCompile(p.e)
			}
		}
		ref = append(ref, c)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	text := func() string {
		var b strings.Builder
		for j := rng.IntN(5); j >= 0; j-- {
			w := words[rng.IntN(len(words))]
			switch rng.IntN(3) {
			case 0:
				w = strings.ToUpper(w)
			case 1:
				w = strings.ToLower(w)
			}
			b.WriteString(w)
			if rng.IntN(2) == 0 {
				b.WriteString(" ")
			}
		}
		return b.String()
	}
	for i := 0; i < 5000; i++ {
		f := Fields{FailureType: text(), FailureMessage: text(), Reason: "rejected"}
		want, wantRule := Unknown, ""
		for _, c := range ref {
			if len(c.r.Reasons) > 0 {
				continue
			}
			ok := (c.f == nil || c.f.MatchString(f.FailureType) || c.f.MatchString(f.FailureMessage)) &&
				(c.t == nil || c.t.MatchString(f.FailureType)) && (c.m == nil || c.m.MatchString(f.FailureMessage))
			if ok {
				want, wantRule = c.r.Category, c.r.Name
				break
			}
		}
		got, gotRule := rs.Match(f)
		require.Equal(t, wantRule, gotRule, "%q / %q", f.FailureType, f.FailureMessage)
		require.Equal(t, want, got)
	}
}
