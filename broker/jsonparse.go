package broker

import (
	"encoding/json"
	"unicode/utf8"
)

// parseJSONFast parses one JSON value into the tree encoding/json builds
// for an any with UseNumber (map[string]any, []any, string, json.Number,
// bool, nil), without reflection: a replay decodes every message's stored
// headers, and encoding/json took most of the time of building the
// message. ok is false for anything it does not handle exactly as
// encoding/json does — invalid JSON, invalid UTF-8, \u escapes of
// surrogates, deep nesting — and the caller then falls back to
// encoding/json, so the result is always the one encoding/json gives.
// (A fuzz test compares the two.)
func parseJSONFast(b []byte) (v any, ok bool) {
	p := jsonParser{b: b}
	p.space()
	v, ok = p.value(0)
	if !ok {
		return nil, false
	}
	p.space()
	if p.i != len(p.b) {
		return nil, false
	}
	return v, true
}

// maxFastDepth is the deepest nesting parseJSONFast handles; deeper input
// goes to encoding/json (and is refused later by decodeValue anyway).
const maxFastDepth = 2 * maxHeaderDepth

type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (any, bool) {
	if p.i >= len(p.b) || depth > maxFastDepth {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		return s, true
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, false
}

func (p *jsonParser) literal(word string) bool {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return false
	}
	p.i += len(word)
	return true
}

func (p *jsonParser) object(depth int) (any, bool) {
	m := make(map[string]any)
	ok := p.members(depth, func(k string, v any) bool {
		m[k] = v // a repeated key: the last one wins, as in encoding/json
		return true
	})
	if !ok {
		return nil, false
	}
	return m, true
}

// members parses the object at p.i, handing each member to each in order;
// each returning false stops the parse, which then reports false.
func (p *jsonParser) members(depth int, each func(k string, v any) bool) bool {
	p.i++ // {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return true
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return false
		}
		k, ok := p.str()
		if !ok {
			return false
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		p.space()
		v, ok := p.value(depth + 1)
		if !ok || !each(k, v) {
			return false
		}
		p.space()
		if p.i >= len(p.b) {
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

func (p *jsonParser) array(depth int) (any, bool) {
	p.i++ // [
	a := []any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return a, true
	}
	for {
		p.space()
		v, ok := p.value(depth + 1)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		p.space()
		if p.i >= len(p.b) {
			return nil, false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return a, true
		default:
			return nil, false
		}
	}
}

// str parses a string starting at its opening quote.
func (p *jsonParser) str() (string, bool) {
	p.i++ // "
	start := p.i
	// Fast path: no escapes, ASCII or valid UTF-8.
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, true
		case c == '\\':
			return p.strEscaped(start)
		case c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", false // encoding/json would substitute U+FFFD
			}
			p.i += size
		}
	}
	return "", false
}

// strEscaped finishes a string that has escapes, from its start.
func (p *jsonParser) strEscaped(start int) (string, bool) {
	out := append(make([]byte, 0, p.i-start+16), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), true
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return "", false
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				if p.i+4 > len(p.b) {
					return "", false
				}
				var r rune
				for _, h := range p.b[p.i : p.i+4] {
					switch {
					case h >= '0' && h <= '9':
						r = r<<4 | rune(h-'0')
					case h >= 'a' && h <= 'f':
						r = r<<4 | rune(h-'a'+10)
					case h >= 'A' && h <= 'F':
						r = r<<4 | rune(h-'A'+10)
					default:
						return "", false
					}
				}
				if r >= 0xD800 && r <= 0xDFFF {
					return "", false // surrogates: leave pairing rules to encoding/json
				}
				p.i += 4
				out = utf8.AppendRune(out, r)
			default:
				return "", false
			}
		case c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", false
			}
			out = append(out, p.b[p.i:p.i+size]...)
			p.i += size
		}
	}
	return "", false
}

// number parses a number by the JSON grammar and keeps its text.
func (p *jsonParser) number() (any, bool) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return nil, false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	return json.Number(p.b[start:p.i]), true
}
