package store

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestParseTextQueryMultibyteSpace: a prefix search whose last word
// follows a no-break or ideographic space (pasted from a chat or typed
// with an input method) reads the word whole. The prefix began with the
// space's last byte, and PostgreSQL refused the query as invalid UTF-8.
func TestParseTextQueryMultibyteSpace(t *testing.T) {
	for _, space := range []string{" ", "\u00a0", "\u202f", "\u3000", "\u2003"} {
		tq, ok := parseTextQuery("quarantined by" + space + "cust*")
		require.True(t, ok)
		require.Equal(t, textQuery{phrase: "quarantined by", prefix: "cust"}, tq, "space %U", []rune(space)[0])
	}
	tq, ok := parseTextQuery("Rotter*")
	require.True(t, ok)
	require.Equal(t, textQuery{prefix: "Rotter"}, tq)
	_, ok = parseTextQuery(" -- * ")
	require.False(t, ok)
}

// FuzzParseTextQuery: valid UTF-8 in, valid UTF-8 out (PostgreSQL refuses
// anything else), the prefix one word with no separator in it, and a
// query said to have words has some.
func FuzzParseTextQuery(f *testing.F) {
	for _, s := range []string{"quarantined by cust*", "a\u00a0b*", "\u3000x*", "order-42*", "**", "Ledger Compactor", "é*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if !utf8.ValidString(q) {
			return
		}
		tq, ok := parseTextQuery(q)
		require.True(t, utf8.ValidString(tq.prefix), "prefix %q of %q", tq.prefix, q)
		require.True(t, utf8.ValidString(tq.phrase), "phrase %q of %q", tq.phrase, q)
		require.Equal(t, -1, strings.IndexFunc(tq.prefix, isWordSeparator), "prefix %q of %q", tq.prefix, q)
		require.Equal(t, ok, hasWord(tq.prefix) || hasWord(tq.phrase), "%q", q)
	})
}

// TestHeaderTextInKeyOrder: the header values come in their keys' order,
// the same each time, and those past the bound are the last keys'. Read in
// a map's order, a message with more header text than the bound had a
// different part of it indexed each time, and words of two values stood
// next to each other (a phrase across them) in some runs only.
func TestHeaderTextInKeyOrder(t *testing.T) {
	long := strings.Repeat("w", headerTextMax/5)
	headers := `{"e":"` + long + `e","a":"` + long + `a","d":"` + long + `d","c":"` + long + `c","b":"` + long + `b",` +
		`"x-death":[{"queue":"q"}],"nested":{"z":"inner z","y":"inner y"}}`
	want := HeaderText([]byte(headers), "", "", "")
	require.Equal(t, headerTextMax, len(want), "bounded")
	lines := strings.Split(want, "\n")
	require.Equal(t, []string{long + "a", long + "b", long + "c", long + "d"}, lines[:4], "a to d whole, in key order")
	require.True(t, strings.HasPrefix(lines[4], "w"), "e cut at the bound: %q", lines[4])
	for range 50 {
		require.Equal(t, want, HeaderText([]byte(headers), "", "", ""))
	}
	require.Equal(t, "inner y\ninner z\nv", HeaderText([]byte(`{"w":"v","nested":{"z":"inner z","y":"inner y"}}`), "", "", ""))
}
