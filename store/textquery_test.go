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
