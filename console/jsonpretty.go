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
	var (
		b       = make([]byte, 0, min(maxOut, 2*len(in)+16))
		stack   []byte // the open brackets
		inStr   bool
		escaped bool
	)
	newline := func() {
		b = append(b, '\n')
		for range stack {
			b = append(b, ' ', ' ')
		}
	}
	i := 0
	for i < len(in) {
		c := in[i]
		if inStr {
			// A whole rune at a time, so that the cut never splits one.
			_, size := utf8.DecodeRune(in[i:])
			if len(b)+size > maxOut {
				break
			}
			b = append(b, in[i:i+size]...)
			i += size
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inStr = false
			}
			continue
		}
		mark := len(b)
		next := i + 1
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			inStr = true
			b = append(b, c)
		case '{', '[':
			b = append(b, c)
			// An empty object or array stays on its line.
			if j := skipSpace(in, i+1); j < len(in) && in[j] == closing(c) {
				b = append(b, in[j])
				next = j + 1
			} else {
				stack = append(stack, c)
				if j < len(in) {
					newline()
				}
			}
		case '}', ']':
			if len(stack) == 0 || closing(stack[len(stack)-1]) != c {
				return "", 0, false
			}
			stack = stack[:len(stack)-1]
			newline()
			b = append(b, c)
		case ',':
			if len(stack) == 0 {
				return "", 0, false
			}
			b = append(b, c)
			newline()
		case ':':
			if len(stack) == 0 || stack[len(stack)-1] != '{' {
				return "", 0, false
			}
			b = append(b, ':', ' ')
		default:
			// Numbers, true, false and null.
			if !bytes.ContainsRune([]byte("0123456789-+.eEtruefalsn"), rune(c)) {
				return "", 0, false
			}
			b = append(b, c)
		}
		if len(b) > maxOut {
			// This step's bytes (ASCII: punctuation and indentation) pass
			// the cap: the output ends before them.
			b = b[:mark]
			break
		}
		i = next
	}
	return string(b), i, true
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
