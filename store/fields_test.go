package store

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func key(k string) PathSegment { return PathSegment{Key: k} }
func index(i int) PathSegment  { return PathSegment{Index: i, IsIndex: true} }

func TestParseField(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]FieldFilter{
		"customer.tier=gold":     {Path: []PathSegment{key("customer"), key("tier")}, Op: FieldEq, Value: json.RawMessage(`"gold"`)},
		`customer.tier = "gold"`: {Path: []PathSegment{key("customer"), key("tier")}, Op: FieldEq, Value: json.RawMessage(`"gold"`)},
		"order.id=42":            {Path: []PathSegment{key("order"), key("id")}, Op: FieldEq, Value: json.RawMessage(`42`)},
		`order.id="42"`:          {Path: []PathSegment{key("order"), key("id")}, Op: FieldEq, Value: json.RawMessage(`"42"`)},
		"order.id!=-1.5e3":       {Path: []PathSegment{key("order"), key("id")}, Op: FieldNe, Value: json.RawMessage(`-1.5e3`)},
		"paid=true":              {Path: []PathSegment{key("paid")}, Op: FieldEq, Value: json.RawMessage(`true`)},
		"note=null":              {Path: []PathSegment{key("note")}, Op: FieldEq, Value: json.RawMessage(`null`)},
		"total>=100":             {Path: []PathSegment{key("total")}, Op: FieldGe, Value: json.RawMessage(`100`)},
		"total<0.5":              {Path: []PathSegment{key("total")}, Op: FieldLt, Value: json.RawMessage(`0.5`)},
		"day>2024-05-01":         {Path: []PathSegment{key("day")}, Op: FieldGt, Value: json.RawMessage(`"2024-05-01"`)},
		"day<=\"2024\"":          {Path: []PathSegment{key("day")}, Op: FieldLe, Value: json.RawMessage(`"2024"`)},
		"items.0.sku=A1":         {Path: []PathSegment{key("items"), index(0), key("sku")}, Op: FieldEq, Value: json.RawMessage(`"A1"`)},
		`prices.\2024=10`:        {Path: []PathSegment{key("prices"), key("2024")}, Op: FieldEq, Value: json.RawMessage(`10`)},
		"big.1234567890?":        {Path: []PathSegment{key("big"), key("1234567890")}, Op: FieldExists},
		"trace?":                 {Path: []PathSegment{key("trace")}, Op: FieldExists},
		`a\.b.c\=d=x=y`:          {Path: []PathSegment{key("a.b"), key("c=d")}, Op: FieldEq, Value: json.RawMessage(`"x=y"`)},
		`name=""`:                {Path: []PathSegment{key("name")}, Op: FieldEq, Value: json.RawMessage(`""`)},
		"name=007":               {Path: []PathSegment{key("name")}, Op: FieldEq, Value: json.RawMessage(`"007"`)},
		"kunde.straße=Köln":      {Path: []PathSegment{key("kunde"), key("straße")}, Op: FieldEq, Value: json.RawMessage(`"Köln"`)},
		`x.\ padded\ =1`:         {Path: []PathSegment{key("x"), key(" padded ")}, Op: FieldEq, Value: json.RawMessage(`1`)},
		"msg=a <b> & c":          {Path: []PathSegment{key("msg")}, Op: FieldEq, Value: marshalString("a <b> & c")},
	} {
		got, err := ParseField(expr)
		require.NoError(t, err, expr)
		require.Equal(t, want, got, expr)
		again, err := ParseField(got.String())
		require.NoError(t, err, "%s renders as %s", expr, got.String())
		require.Equal(t, got, again, "%s renders as %s", expr, got.String())
	}
}

func TestParseFieldRefuses(t *testing.T) {
	t.Parallel()
	for expr, problem := range map[string]string{
		"":                               "no operator",
		"customer.tier":                  "no operator",
		"customer..tier=gold":            "empty path segment at byte 9",
		".tier=gold":                     "empty path segment at byte 0",
		"tier.=gold":                     "empty path segment at byte 5",
		"=gold":                          "empty path segment",
		"tier=":                          "has no value",
		"tier!gold":                      "unknown operator",
		"tier?=x":                        "unknown operator",
		"tier=<3":                        "", // the value is "<3": a string
		"paid<true":                      "compares numbers or strings",
		"note>=null":                     "compares numbers or strings",
		`tier="gold`:                     "not a JSON string",
		`tier\`:                          "lone backslash",
		"a\x00b=1":                       "without NUL",
		"a\xffb=1":                       "valid UTF-8",
		strings.Repeat("a.", 40) + "a=1": "deeper than 32",
		strings.Repeat("a", 1001) + "=1": "at most 1000",
	} {
		_, err := ParseField(expr)
		if problem == "" {
			require.NoError(t, err, expr)
			continue
		}
		require.Error(t, err, expr)
		require.True(t, errors.Is(err, ErrInvalidFilter), expr)
		require.Contains(t, err.Error(), problem, expr)
		require.Less(t, len(err.Error()), 400, "the message quotes at most the start of the expression")
	}
}

func TestFieldJSONPath(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		"a.b=1":         `$."a"."b"`,
		"items.3.sku=1": `$."items"[3]."sku"`,
		`we\"ird\\.k=1`: `$."we\"ird\\"."k"`,
		"tab\tkey=1":    `$."tab\u0009key"`,
		`$x.@y=1`:       `$."$x"."@y"`,
	} {
		f, err := ParseField(expr)
		require.NoError(t, err, expr)
		require.Equal(t, want, f.jsonPath(), expr)
	}
	var args sqlArgs
	f, err := ParseField("a!=1")
	require.NoError(t, err)
	require.Equal(t, `(jsonb_path_exists(d, $3::jsonpath) AND NOT jsonb_path_exists(d, $2::jsonpath, $1::jsonb))`, f.sql("d", &args))
	require.Equal(t, []any{`{"v":1}`, `$."a" ? (@ == $v)`, `$."a"`}, []any(args))
}

// ParseField never panics, refuses with ErrInvalidFilter and a short
// message, and what it accepts renders to text that parses back to the
// same filter.
func FuzzParseField(f *testing.F) {
	for _, s := range []string{
		"customer.tier=gold", `order.id="42"`, "items.0.sku!=A1", "total>=1e3", "trace?", `a\.b=x`,
		`prices.\2024<=10`, "x= padded ", "flag=false", "n=null", "a..b=1", "=", "a!b", `x="unterminated`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		got, err := ParseField(expr)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidFilter)
			require.Less(t, len(err.Error()), 600)
			return
		}
		require.NotEmpty(t, got.Path)
		require.True(t, json.Valid(got.Value) || got.Op == FieldExists)
		again, err := ParseField(got.String())
		require.NoError(t, err, "%q renders as %q", expr, got.String())
		require.Equal(t, got, again, "%q renders as %q", expr, got.String())
		var args sqlArgs
		_ = got.sql("d", &args)
	})
}
