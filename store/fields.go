package store

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A field filter is one condition on a JSON body: "<path><op><value>", or
// "<path>?" for "the path exists". It is parsed here, once, for every door
// (the API's field parameter, the "fields" of a JSON filter, the CLI).
//
// The path is a dot path under the body: customer.tier, order.id. A
// backslash makes the next character literal (a key with a dot,
// "a\.b"). How a path meets an array:
//
//   - a key meeting an array looks into every element: items.sku=A1
//     matches when any element of items has sku A1;
//   - a segment of at most 9 digits, not escaped, picks one element:
//     items.0.sku=A1 looks at the first only. (A value that is not an array
//     counts as an array of one; an object key made of digits is written
//     escaped: prices.\2024);
//   - a comparison meeting an array compares its elements: tags=red
//     matches when tags is "red" or holds "red".
//
// The value compares as a JSON number when it is one (42, -1.5e3), as a
// boolean for true and false, as null for null, as the string inside the
// quotes for a JSON string ("42" is a string, and "" the empty one), and
// otherwise as the text itself (gold). Types are strict: 42 does not equal
// "42". Ops:
//
//   - = the value at the path equals the value;
//   - != the path exists and its value does not equal the value (for an
//     array: holds no element equal to it);
//   - < > <= >= numbers compare as numbers, strings by code point; values
//     of another type never match;
//   - ? the path exists (its value may be null).
//
// A body that is not a JSON object or array (binary, text, invalid UTF-8,
// invalid JSON) never matches any field filter, not even with !=.

// Bounds of field filters.
const (
	MaxFieldFilters   = 16
	maxFieldLen       = 1000
	maxFieldDepth     = 32
	maxFieldIndexLen  = 9
	fieldOpCharacters = "=!<>?"
)

// Field filter operators.
const (
	FieldEq     = "="
	FieldNe     = "!="
	FieldLt     = "<"
	FieldGt     = ">"
	FieldLe     = "<="
	FieldGe     = ">="
	FieldExists = "?"
)

// PathSegment is one step of a field path: an object key, or an array
// index.
type PathSegment struct {
	Key     string
	Index   int
	IsIndex bool
}

// FieldFilter is a parsed field filter.
type FieldFilter struct {
	Path []PathSegment
	Op   string
	// Value is the JSON value compared with (a number, a string, true,
	// false or null); nil for FieldExists.
	Value json.RawMessage
}

func fieldErr(expr, format string, a ...any) error {
	if len(expr) > 100 {
		expr = strings.ToValidUTF8(expr[:100], "") + "…"
	}
	return fmt.Errorf("%w: field %q: %s", ErrInvalidFilter, expr, fmt.Sprintf(format, a...))
}

// ParseField parses one field filter. Its errors match ErrInvalidFilter
// and name the expression and what is wrong with it.
func ParseField(expr string) (FieldFilter, error) {
	switch {
	case len(expr) > maxFieldLen:
		return FieldFilter{}, fieldErr(expr, "is %d bytes; at most %d", len(expr), maxFieldLen)
	case !utf8.ValidString(expr) || strings.IndexByte(expr, 0) >= 0:
		return FieldFilter{}, fieldErr(expr, "must be valid UTF-8 text without NUL")
	}
	var (
		f       FieldFilter
		seg     strings.Builder
		escaped bool // the current segment has an escaped character
		i       int
	)
	endSegment := func(at int) error {
		key := seg.String()
		if !escaped {
			key = strings.TrimSpace(key)
		}
		if key == "" {
			return fieldErr(expr, "empty path segment at byte %d (write a.b.c; a key with a dot as a\\.b)", at)
		}
		if len(f.Path) == maxFieldDepth {
			return fieldErr(expr, "path is deeper than %d segments", maxFieldDepth)
		}
		s := PathSegment{Key: key}
		if !escaped && len(key) <= maxFieldIndexLen && allDigits(key) {
			s = PathSegment{Index: atoi(key), IsIndex: true}
		}
		f.Path = append(f.Path, s)
		seg.Reset()
		escaped = false
		return nil
	}
loop:
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '\\':
			if i+1 == len(expr) {
				return FieldFilter{}, fieldErr(expr, "ends with a lone backslash")
			}
			r, n := utf8.DecodeRuneInString(expr[i+1:])
			seg.WriteRune(r)
			escaped = true
			i += 1 + n
		case c == '.':
			if err := endSegment(i); err != nil {
				return FieldFilter{}, err
			}
			i++
		case strings.IndexByte(fieldOpCharacters, c) >= 0:
			break loop
		default:
			seg.WriteByte(c)
			i++
		}
	}
	if i == len(expr) {
		return FieldFilter{}, fieldErr(expr, "has no operator: write <path><op><value> with op one of = != < > <= >=, or <path>? for exists")
	}
	if err := endSegment(i); err != nil {
		return FieldFilter{}, err
	}
	rest := expr[i:]
	switch {
	case rest == "?":
		f.Op = FieldExists
		return f, nil
	case strings.HasPrefix(rest, "!="), strings.HasPrefix(rest, "<="), strings.HasPrefix(rest, ">="):
		f.Op, rest = rest[:2], rest[2:]
	case rest[0] == '=', rest[0] == '<', rest[0] == '>':
		f.Op, rest = rest[:1], rest[1:]
	default:
		return FieldFilter{}, fieldErr(expr, "unknown operator at byte %d: use = != < > <= >=, or ? alone at the end for exists", i)
	}
	v, err := fieldValue(strings.TrimSpace(rest))
	if err != nil {
		return FieldFilter{}, fieldErr(expr, "%s", err)
	}
	if f.Op != FieldEq && f.Op != FieldNe && v[0] != '"' && !isJSONNumberStart(v[0]) {
		return FieldFilter{}, fieldErr(expr, "%s compares numbers or strings, not %s", f.Op, v)
	}
	f.Value = v
	return f, nil
}

// fieldValue reads a value as the JSON it compares as.
func fieldValue(s string) (json.RawMessage, error) {
	switch {
	case s == "":
		return nil, fmt.Errorf(`has no value: write "" for the empty string`)
	case s == "true", s == "false", s == "null":
		return json.RawMessage(s), nil
	case s[0] == '"':
		var str string
		if err := json.Unmarshal([]byte(s), &str); err != nil {
			return nil, fmt.Errorf("value %s starts with a quote but is not a JSON string", s)
		}
		return marshalString(str), nil
	case isJSONNumberStart(s[0]) && isJSONNumber(s):
		return json.RawMessage(s), nil
	}
	return marshalString(s), nil
}

func isJSONNumberStart(c byte) bool { return c == '-' || (c >= '0' && c <= '9') }

// isJSONNumber reports whether s is exactly one JSON number.
func isJSONNumber(s string) bool {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return false
	}
	n, ok := v.(json.Number)
	return ok && string(n) == s
}

func marshalString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a valid UTF-8 string always encodes
	return b
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// String renders f in the syntax ParseField reads, canonically: parsing
// it again gives f.
func (f FieldFilter) String() string {
	var b strings.Builder
	for i, s := range f.Path {
		if i > 0 {
			b.WriteByte('.')
		}
		if s.IsIndex {
			b.WriteString(strconv.Itoa(s.Index))
			continue
		}
		for j, r := range s.Key {
			if strings.ContainsRune(`.\`+fieldOpCharacters, r) ||
				(j == 0 && (allDigits(s.Key) && len(s.Key) <= maxFieldIndexLen)) ||
				((j == 0 || j == len(s.Key)-utf8.RuneLen(r)) && unicode.IsSpace(r)) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	b.WriteString(f.Op)
	if f.Op == FieldExists {
		return b.String()
	}
	if f.Value[0] == '"' {
		var s string
		_ = json.Unmarshal(f.Value, &s)
		if v, err := fieldValue(s); err == nil && string(v) == string(f.Value) && strings.TrimSpace(s) == s {
			b.WriteString(s) // reads back as the same string
			return b.String()
		}
	}
	b.Write(f.Value)
	return b.String()
}

// jsonPath renders the path as an SQL/JSON path expression (lax mode):
// keys as quoted member accessors, indexes as array accessors.
func (f FieldFilter) jsonPath() string {
	var b strings.Builder
	b.WriteString("$")
	for _, s := range f.Path {
		if s.IsIndex {
			b.WriteString("[" + strconv.Itoa(s.Index) + "]")
			continue
		}
		b.WriteString(`."`)
		for _, r := range s.Key {
			switch {
			case r == '"' || r == '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r < 0x20:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
	}
	return b.String()
}

// sql renders f as a condition on doc, the body as jsonb (NULL when it is
// not JSON, which matches nothing).
func (f FieldFilter) sql(doc string, args *sqlArgs) string {
	path := f.jsonPath()
	if f.Op == FieldExists {
		return "jsonb_path_exists(" + doc + ", " + args.add(path) + "::jsonpath)"
	}
	vars := args.add(`{"v":` + string(f.Value) + `}`)
	op := f.Op
	if op == FieldEq || op == FieldNe {
		op = "=="
	}
	cmp := "jsonb_path_exists(" + doc + ", " + args.add(path+" ? (@ "+op+" $v)") + "::jsonpath, " + vars + "::jsonb)"
	if f.Op == FieldNe {
		return "(jsonb_path_exists(" + doc + ", " + args.add(path) + "::jsonpath) AND NOT " + cmp + ")"
	}
	return cmp
}

// parseFields parses every field filter of a filter.
func parseFields(exprs []string) ([]FieldFilter, error) {
	if len(exprs) > MaxFieldFilters {
		return nil, fmt.Errorf("%w: fields: %d field filters; at most %d", ErrInvalidFilter, len(exprs), MaxFieldFilters)
	}
	out := make([]FieldFilter, 0, len(exprs))
	for _, e := range exprs {
		f, err := ParseField(e)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// fieldsCond renders the field filters as one condition on the row
// aliased m. The body is parsed once per row (dlq_body_json, migration
// 00072): OFFSET 0 keeps the planner from copying the call into every
// condition.
func fieldsCond(fields []FieldFilter, args *sqlArgs) string {
	conds := make([]string, len(fields))
	for i, f := range fields {
		conds[i] = f.sql("b.doc", args)
	}
	return "coalesce((SELECT " + strings.Join(conds, " AND ") +
		" FROM (SELECT dlq_body_json(m.body) AS doc OFFSET 0) b), false)"
}
