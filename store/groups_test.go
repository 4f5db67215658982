package store

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestNormalizeFailure(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"upstream took 1500ms": "upstream took <n>ms",
		"upstream took 87ms":   "upstream took <n>ms",
		"order 3f2a9c1e-0b7d-4c55-9a4e-1f2e3d4c5b6a not found": "order <uuid> not found",
		"object 0xdeadBEEF freed twice":                        "object <hex> freed twice",
		"commit 9f86d081884c7d65 failed":                       "commit <hex> failed",
		"user 'alice' has no account":                          "user '<q>' has no account",
		`field "qty" must be positive`:                         `field "<q>" must be positive`,
		"don't retry":                                          "don't retry",
		"HTTP 503 from http://10.0.0.12:8080/api":              "HTTP <n> from http://<n>.<n>.<n>.<n>:<n>/api",
		"line one\n\tline   two":                               "line one line two",
		"retry-7 of job_42":                                    "retry-<n> of job_<n>",
		"deadbeef":                                             "deadbeef",
		"12345678":                                             "<n>",
		"TimeoutError: Request timed out after 30.5 seconds (attempt 3)": "TimeoutError: Request timed out after <n>.<n> seconds (attempt <n>)",
		"": "",
	} {
		require.Equal(t, want, NormalizeFailure(in), "%q", in)
	}
	// Different ids, same group; different words, different groups.
	a := GroupIDOf("orders", "rejected", "KeyError", "missing key 'sku-1'")
	require.Equal(t, a, GroupIDOf("orders", "rejected", "KeyError", "missing key 'sku-2'"))
	require.NotEqual(t, a, GroupIDOf("billing", "rejected", "KeyError", "missing key 'sku-1'"))
	require.NotEqual(t, a, GroupIDOf("orders", "rejected", "ValueError", "missing key 'sku-1'"))
	require.NotEqual(t, a, GroupIDOf("orders", "rejected", "KeyError", "missing field 'sku-1'"))
	id, err := ParseGroupID(a)
	require.NoError(t, err)
	require.Equal(t, a, FormatGroupID(id))
	for _, bad := range []string{"", "xyz", "0000000000000000", "123", "0123456789abcdefa", "g123456789abcdef"} {
		_, err := ParseGroupID(bad)
		require.ErrorIs(t, err, ErrInvalidFilter, "%q", bad)
	}
}

// FuzzNormalizeFailure: never panics, stays valid UTF-8 for valid input,
// is idempotent and never grows a message by more than its masks.
func FuzzNormalizeFailure(f *testing.F) {
	for _, s := range []string{"upstream took 1500ms", "order 3f2a9c1e-0b7d-4c55-9a4e-1f2e3d4c5b6a", `"a" 'b' ` + "`c`", "0x", "é 12 ü", "'unterminated"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := NormalizeFailure(s)
		if utf8.ValidString(s) && !utf8.ValidString(n) && len(s) <= maxPatternInput {
			t.Fatalf("normalising valid %q gave invalid %q", s, n)
		}
		if again := NormalizeFailure(n); again != n && len(n) <= maxPatternInput {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, n, again)
		}
	})
}

func TestFilterSearchConds(t *testing.T) {
	t.Parallel()
	var args sqlArgs
	conds, err := Filter{Query: " Took 1500MS ", Group: FormatGroupID(42)}.searchConds(&args, false)
	require.NoError(t, err)
	require.Len(t, conds, 2)
	require.Equal(t, []any{int64(42), "%Took 1500MS%", []int64{KeyHash("took 1500ms")}, []string{"took 1500ms"},
		"%Took <n>MS%", []int64{KeyHash("1500ms")}, []string{"1500ms"}, "%Took 1500MS%", "Took 1500MS"}, []any(args))
	require.Contains(t, conds[1], "search_keys @> $7::text[]", "q's values whole, as the listing requires")
	require.Contains(t, conds[1], "dlq_search_document(m.failure_type", "words through the text index")
	require.Contains(t, conds[1], "m.enc_key_id IS NULL", "the text index's predicate")
	require.Contains(t, conds[1], "search_hashes @>", "the GIN index is over the hashes")
	require.Contains(t, conds[1], "search_keys @>", "the keys themselves are checked")
	require.NotContains(t, conds[1], "position(", "bodies only with a source queue")
	args = nil
	conds, err = Filter{Query: "a_b%", SourceQueue: "orders"}.searchConds(&args, false)
	require.NoError(t, err)
	require.Contains(t, conds[0], "position(")
	require.Equal(t, []any{`%a\_b\%%`, []int64{KeyHash("a_b%")}, []string{"a_b%"}, "a_b%", []byte("a_b%")}, []any(args))
	args = nil
	conds, err = Filter{Query: "a_b%", SourceQueue: "orders"}.searchConds(&args, true)
	require.NoError(t, err)
	require.NotContains(t, conds[0], "position(", "not bodies for a caller who may not see them")
	require.Contains(t, conds[0], "m.body, 0)", "nor their words: the document is checked again without the body")
	for _, f := range []Filter{{Query: "ab"}, {Query: "  a "}, {Query: "a\x00bc"}, {Query: "\xff\xfe\xfd"}, {Group: "nope"}} {
		_, err := f.searchConds(&args, false)
		require.ErrorIs(t, err, ErrInvalidFilter, "%+v", f)
	}
}

func TestEscapeLike(t *testing.T) {
	t.Parallel()
	require.Equal(t, `100\% of a\_b\\c`, escapeLike(`100% of a_b\c`))
	require.Equal(t, "plain", escapeLike("plain"))
}

func TestSearchKeys(t *testing.T) {
	t.Parallel()
	m := NewMessage{
		MessageID:      "Order-7F3A",
		FailureType:    "ValidationError",
		FailureMessage: `field 'sku' has invalid value 'SKU-4242' (order 981, host 10.0.1.2:5432)`,
		Headers: []byte(`{"trace-id":"Trace-ABC-123","attempt":{"type":"int32","value":12345},"ratio":{"type":"float64","value":0.5},` +
			`"x-death":[{"queue":"orders"}],"x-first-death-queue":"orders","x-error-message":"field 'sku' has invalid value 'SKU-4242' (order 981, host 10.0.1.2:5432)",` +
			`"x-exception-type":"ValidationError","nested":{"a":"b1","deeper":{"c":"d1"}},"long":"` + strings.Repeat("x", 300) + `"}`),
	}
	keys := SearchKeys(&m)
	require.ElementsMatch(t, []string{"order-7f3a", "trace-abc-123", "12345", "b1", "sku", "sku-4242", "981", "10.0.1.2:5432", "10.0.1.2", "5432"}, keys)
	require.Empty(t, SearchKeys(&NewMessage{Headers: []byte(`not json`)}))
	many := NewMessage{FailureMessage: strings.Repeat("id-1 id-2 id-3 id-4 id-5 id-6 id-7 id-8 id-9 id-10 id-11 id-12 id-13 id-14 id-15 id-16 id-17 id-18 ", 3)}
	require.Len(t, SearchKeys(&many), maxSearchKeys)
}
