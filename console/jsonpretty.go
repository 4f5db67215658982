package console

import (
	"bytes"
	"unicode/utf8"
)

// prettyJSON indents JSON text two spaces a level, as json.Indent does,
// but reads it as a stream and stops at maxOut bytes of output: a body of
// megabytes shows its beginning formatted, and a cut in the middle of a
// value (a string, a number, an unclosed object) is no error. It never
// splits a UTF-8 sequence. consumed is how many input bytes the output
// covers; ok is false when the input is not JSON as far as it was read (a
// byte that no JSON text has there, or brackets that do not match), and
// the caller shows it as text instead.
func prettyJSON(in []byte, maxOut int) (out string, consumed int, ok bool) {
	p := jsonIndenter{b: make([]byte, 0, min(maxOut, 2*len(in)+16))}
	i := 0
	for i < len(in) {
		if p.inStr {
			next, fits := p.stringRune(in, i, maxOut)
			if !fits {
				break
			}
			i = next
			continue
		}
		mark := len(p.b)
		next, ok := p.token(in, i)
		if !ok {
			return "", 0, false
		}
		if len(p.b) > maxOut {
			// This step's bytes (ASCII: punctuation and indentation) pass
			// the cap: the output ends before them.
			p.b = p.b[:mark]
			break
		}
		i = next
	}
	return string(p.b), i, true
}

// jsonIndenter is prettyJSON's state: the output so far, and where in the
// JSON text it is.
type jsonIndenter struct {
	b       []byte
	stack   []byte // the open brackets
	inStr   bool
	escaped bool
}

func (p *jsonIndenter) newline() {
	p.b = append(p.b, '\n')
	for range p.stack {
		p.b = append(p.b, ' ', ' ')
	}
}

// stringRune copies the rune at in[i], inside a string, and returns where
// the next one starts; false, copying nothing, when it would take the
// output past maxOut.
func (p *jsonIndenter) stringRune(in []byte, i, maxOut int) (next int, fits bool) {
	c := in[i]
	// A whole rune at a time, so that the cut never splits one.
	_, size := utf8.DecodeRune(in[i:])
	if len(p.b)+size > maxOut {
		return i, false
	}
	p.b = append(p.b, in[i:i+size]...)
	switch {
	case p.escaped:
		p.escaped = false
	case c == '\\':
		p.escaped = true
	case c == '"':
		p.inStr = false
	}
	return i + size, true
}

// token writes the byte at in[i], outside strings, with the indentation
// that goes with it, and returns where the next step starts; false when
// no JSON text has that byte there.
func (p *jsonIndenter) token(in []byte, i int) (next int, ok bool) {
	c := in[i]
	next = i + 1
	switch c {
	case ' ', '\t', '\n', '\r':
	case '"':
		p.inStr = true
		p.b = append(p.b, c)
	case '{', '[':
		p.b = append(p.b, c)
		// An empty object or array stays on its line.
		if j := skipSpace(in, i+1); j < len(in) && in[j] == closing(c) {
			p.b = append(p.b, in[j])
			next = j + 1
		} else {
			p.stack = append(p.stack, c)
			if j < len(in) {
				p.newline()
			}
		}
	case '}', ']':
		if len(p.stack) == 0 || closing(p.stack[len(p.stack)-1]) != c {
			return 0, false
		}
		p.stack = p.stack[:len(p.stack)-1]
		p.newline()
		p.b = append(p.b, c)
	case ',':
		if len(p.stack) == 0 {
			return 0, false
		}
		p.b = append(p.b, c)
		p.newline()
	case ':':
		if len(p.stack) == 0 || p.stack[len(p.stack)-1] != '{' {
			return 0, false
		}
		p.b = append(p.b, ':', ' ')
	default:
		// Numbers, true, false and null.
		if !bytes.ContainsRune([]byte("0123456789-+.eEtruefalsn"), rune(c)) {
			return 0, false
		}
		p.b = append(p.b, c)
	}
	return next, true
}

func closing(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

func skipSpace(in []byte, i int) int {
	for i < len(in) && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n' || in[i] == '\r') {
		i++
	}
	return i
}
