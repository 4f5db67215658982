package ops

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// JSON body paths for redaction: "card.number", "$.user.email",
// "items[*].card", "items[0].sku". A key segment reaches into the
// members of an object; reached on an array, it applies to every element
// (so "items.sku" covers [{"sku":…},…] too, at any depth of arrays);
// "[*]" or "[]" is every element and "[n]" one. The value found is
// replaced whole, whatever it is (an object, an array, a number).
//
// The scanner below reads the body's bytes and replaces only the spans of
// the values found: the rest of the body stays byte for byte as stored.

// bodyPath is a parsed body path.
type bodyPath []pathSeg

type pathSeg struct {
	key   string // a member name; "" for an array step
	index int    // the element of an array step; -1 for every element
}

func (p bodyPath) String() string {
	var b strings.Builder
	b.WriteByte('$')
	for _, s := range p {
		switch {
		case s.key != "":
			b.WriteByte('.')
			b.WriteString(s.key)
		case s.index < 0:
			b.WriteString("[*]")
		default:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		}
	}
	return b.String()
}

// parseBodyPath reads one configured path.
func parseBodyPath(s string) (bodyPath, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "$"), ".")
	if t == "" {
		return nil, fmt.Errorf("body path %q names no field (write e.g. card.number or $.user.email)", s)
	}
	var p bodyPath
	for _, part := range strings.Split(t, ".") {
		key, rest, _ := strings.Cut(part, "[")
		if key == "" && rest == "" {
			return nil, fmt.Errorf("body path %q has an empty segment", s)
		}
		if key != "" {
			if strings.ContainsAny(key, "]*$ ") {
				return nil, fmt.Errorf("body path %q: segment %q is not a field name", s, key)
			}
			p = append(p, pathSeg{key: key, index: -1})
		}
		for rest != "" {
			idx, after, ok := strings.Cut(rest, "]")
			if !ok {
				return nil, fmt.Errorf("body path %q: [ without ]", s)
			}
			switch idx {
			case "", "*":
				p = append(p, pathSeg{index: -1})
			default:
				n, err := strconv.Atoi(idx)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("body path %q: [%s] must be [*], [] or an index", s, idx)
				}
				p = append(p, pathSeg{index: n})
			}
			if after != "" && !strings.HasPrefix(after, "[") {
				return nil, fmt.Errorf("body path %q: unexpected %q after ]", s, after)
			}
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return p, nil
}

// errNotJSON is a body the scanner cannot read as JSON.
var errNotJSON = errors.New("not valid JSON")

// maxJSONDepth bounds nesting: deeper is refused like invalid JSON.
const maxJSONDepth = 512

// found is a value a path reached: its bytes doc[start:end] and where it
// is (object keys as strings, array indexes as ints).
type found struct {
	start, end int
	loc        []any
}

// state is a path matched up to pos.
type state struct {
	path bodyPath
	pos  int
}

// scanner walks one JSON document.
type scanner struct {
	doc   []byte
	found []found
	loc   []any
}

// findPaths returns the values of doc that paths reach, in document
// order, none inside another; errNotJSON when doc is not one JSON value.
func findPaths(doc []byte, paths []bodyPath) ([]found, error) {
	// Checked whole first (escapes, numbers, UTF-8): the scanner below
	// only finds the values' boundaries.
	if !json.Valid(doc) {
		return nil, errNotJSON
	}
	sc := &scanner{doc: doc}
	states := make([]state, 0, len(paths))
	for _, p := range paths {
		states = append(states, state{path: p})
	}
	i := sc.ws(0)
	end, err := sc.value(i, states, 0)
	if err != nil {
		return nil, err
	}
	if sc.ws(end) != len(doc) {
		return nil, fmt.Errorf("%w: data after the value at byte %d", errNotJSON, end)
	}
	return sc.found, nil
}

func (sc *scanner) ws(i int) int {
	for i < len(sc.doc) {
		switch sc.doc[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value scans the value at i with the states that reached it and
// returns where it ends.
func (sc *scanner) value(i int, states []state, depth int) (int, error) {
	for _, s := range states {
		if s.pos == len(s.path) {
			end, err := sc.skip(i, depth)
			if err != nil {
				return 0, err
			}
			sc.found = append(sc.found, found{start: i, end: end, loc: slices.Clone(sc.loc)})
			return end, nil
		}
	}
	if i >= len(sc.doc) {
		return 0, fmt.Errorf("%w: unexpected end", errNotJSON)
	}
	if len(states) == 0 {
		return sc.skip(i, depth)
	}
	switch sc.doc[i] {
	case '{':
		return sc.object(i, states, depth+1)
	case '[':
		return sc.array(i, states, depth+1)
	}
	return sc.skip(i, depth)
}

func (sc *scanner) object(i int, states []state, depth int) (int, error) {
	if depth > maxJSONDepth {
		return 0, fmt.Errorf("%w: nested deeper than %d", errNotJSON, maxJSONDepth)
	}
	i = sc.ws(i + 1)
	if i < len(sc.doc) && sc.doc[i] == '}' {
		return i + 1, nil
	}
	next := make([]state, 0, len(states))
	for {
		if i >= len(sc.doc) || sc.doc[i] != '"' {
			return 0, fmt.Errorf("%w: expected a member name at byte %d", errNotJSON, i)
		}
		kend, err := sc.str(i)
		if err != nil {
			return 0, err
		}
		key, err := sc.key(i, kend)
		if err != nil {
			return 0, err
		}
		i = sc.ws(kend)
		if i >= len(sc.doc) || sc.doc[i] != ':' {
			return 0, fmt.Errorf("%w: expected : at byte %d", errNotJSON, i)
		}
		next = next[:0]
		for _, s := range states {
			if seg := s.path[s.pos]; seg.key != "" && seg.key == key {
				next = append(next, state{s.path, s.pos + 1})
			}
		}
		sc.loc = append(sc.loc, key)
		i, err = sc.value(sc.ws(i+1), next, depth)
		sc.loc = sc.loc[:len(sc.loc)-1]
		if err != nil {
			return 0, err
		}
		i = sc.ws(i)
		if i >= len(sc.doc) {
			return 0, fmt.Errorf("%w: unexpected end in an object", errNotJSON)
		}
		if sc.doc[i] == '}' {
			return i + 1, nil
		}
		if sc.doc[i] != ',' {
			return 0, fmt.Errorf("%w: expected , or } at byte %d", errNotJSON, i)
		}
		i = sc.ws(i + 1)
	}
}

func (sc *scanner) array(i int, states []state, depth int) (int, error) {
	if depth > maxJSONDepth {
		return 0, fmt.Errorf("%w: nested deeper than %d", errNotJSON, maxJSONDepth)
	}
	i = sc.ws(i + 1)
	if i < len(sc.doc) && sc.doc[i] == ']' {
		return i + 1, nil
	}
	next := make([]state, 0, len(states))
	for n := 0; ; n++ {
		next = next[:0]
		for _, s := range states {
			switch seg := s.path[s.pos]; {
			case seg.key != "":
				next = append(next, s) // a key reached on an array: every element
			case seg.index < 0 || seg.index == n:
				next = append(next, state{s.path, s.pos + 1})
			}
		}
		sc.loc = append(sc.loc, n)
		var err error
		i, err = sc.value(i, next, depth)
		sc.loc = sc.loc[:len(sc.loc)-1]
		if err != nil {
			return 0, err
		}
		i = sc.ws(i)
		if i >= len(sc.doc) {
			return 0, fmt.Errorf("%w: unexpected end in an array", errNotJSON)
		}
		if sc.doc[i] == ']' {
			return i + 1, nil
		}
		if sc.doc[i] != ',' {
			return 0, fmt.Errorf("%w: expected , or ] at byte %d", errNotJSON, i)
		}
		i = sc.ws(i + 1)
	}
}

// key decodes the member name doc[i:end] (quotes included).
func (sc *scanner) key(i, end int) (string, error) {
	raw := sc.doc[i:end]
	if !slices.Contains(raw, '\\') {
		return string(raw[1 : len(raw)-1]), nil
	}
	var k string
	if err := json.Unmarshal(raw, &k); err != nil {
		return "", fmt.Errorf("%w: member name at byte %d: %v", errNotJSON, i, err)
	}
	return k, nil
}

// str returns the end of the string starting at i.
func (sc *scanner) str(i int) (int, error) {
	for j := i + 1; j < len(sc.doc); j++ {
		switch sc.doc[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		default:
			if sc.doc[j] < 0x20 {
				return 0, fmt.Errorf("%w: control character in a string at byte %d", errNotJSON, j)
			}
		}
	}
	return 0, fmt.Errorf("%w: unterminated string at byte %d", errNotJSON, i)
}

// skip returns the end of the value at i, checked.
func (sc *scanner) skip(i, depth int) (int, error) {
	if i >= len(sc.doc) {
		return 0, fmt.Errorf("%w: unexpected end", errNotJSON)
	}
	switch c := sc.doc[i]; {
	case c == '{':
		return sc.object(i, nil, depth+1)
	case c == '[':
		return sc.array(i, nil, depth+1)
	case c == '"':
		return sc.str(i)
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(string(sc.doc[i:min(i+5, len(sc.doc))]), lit) {
				return i + len(lit), nil
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		j := i + 1
		for j < len(sc.doc) && strings.IndexByte("0123456789+-.eE", sc.doc[j]) >= 0 {
			j++
		}
		if json.Valid(sc.doc[i:j]) {
			return j, nil
		}
	}
	return 0, fmt.Errorf("%w: unexpected %q at byte %d", errNotJSON, sc.doc[i], i)
}

// replaceSpans writes doc with each found value replaced by with.
func replaceSpans(doc []byte, spans []found, with func(found) []byte) []byte {
	out := make([]byte, 0, len(doc))
	at := 0
	for _, f := range spans {
		out = append(out, doc[at:f.start]...)
		out = append(out, with(f)...)
		at = f.end
	}
	return append(out, doc[at:]...)
}

// valueAt returns the bytes of the value at loc in doc.
func valueAt(doc []byte, loc []any) ([]byte, bool) {
	p := make(bodyPath, len(loc))
	for i, l := range loc {
		switch v := l.(type) {
		case string:
			p[i] = pathSeg{key: v, index: -1}
		case int:
			p[i] = pathSeg{index: v}
		}
	}
	// An exact location: key steps must not spread over arrays.
	fs, err := findPaths(doc, []bodyPath{p})
	if err != nil {
		return nil, false
	}
	for _, f := range fs {
		if slices.Equal(f.loc, loc) {
			return doc[f.start:f.end], true
		}
	}
	return nil, false
}
