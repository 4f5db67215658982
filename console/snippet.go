package console

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlq/dlq/store"
)

// snippetBodyPrefix is how much of each body a search's page reads to
// show where q matched in it.
const snippetBodyPrefix = 4 << 10

// snippetContext is how many characters a snippet shows on each side of
// the match.
const snippetContext = 60

// snippet is where a search matched in one message, and the text around
// it: Before, Match and After are shown as text, Match marked.
type snippet struct {
	// Where names the place: "failure text", "stack trace", "header
	// x-order-id", "message id", "body".
	Where                string
	Before, Match, After string
}

// findSnippet looks for q in a message as a search does (case-insensitive:
// the whole of q, else its longest word; a trailing * is a prefix), in the
// order a reader cares about: failure text, headers, message id, body
// (the first snippetBodyPrefix bytes, when the viewer may see it). nil
// when q is not found there (it matched elsewhere: the stack's words, a
// header value whole, further into the body).
func findSnippet(m store.Message, q string) *snippet {
	terms := searchTerms(q)
	if len(terms) == 0 {
		return nil
	}
	type place struct{ where, text string }
	var places []place
	if f := viewFailure(m.Failure); f != nil {
		places = append(places, place{"failure text", f.Type + ": " + f.Message}, place{"stack trace", f.Stack})
	}
	for _, h := range viewFields(m.Headers) {
		places = append(places, place{"header " + h.Name, h.Value})
	}
	if m.MessageID != nil {
		places = append(places, place{"message id", *m.MessageID})
	}
	if m.Body != nil && isText(trimRune(*m.Body)) {
		places = append(places, place{"body", string(trimRune(*m.Body))})
	}
	for _, term := range terms {
		for _, p := range places {
			if s := cut(p.text, term); s != nil {
				s.Where = p.where
				return s
			}
		}
	}
	return nil
}

// searchTerms are what a snippet looks for: q as a phrase, then its words,
// longest first (a short word is found everywhere).
func searchTerms(q string) []string {
	q = strings.TrimSuffix(strings.TrimSpace(q), "*")
	if q == "" {
		return nil
	}
	terms := []string{q}
	words := strings.FieldsFunc(q, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r) && r != '-' && r != '_' && r != '.'
	})
	if len(words) > 1 {
		// Longest first; stable, so equal lengths keep q's order.
		for i := 1; i < len(words); i++ {
			for j := i; j > 0 && len(words[j]) > len(words[j-1]); j-- {
				words[j], words[j-1] = words[j-1], words[j]
			}
		}
		for _, w := range words {
			if utf8.RuneCountInString(w) >= 3 {
				terms = append(terms, w)
			}
		}
	}
	return terms
}

// cut finds term in text, ignoring case, and returns it with
// snippetContext characters of text on each side; nil when absent.
func cut(text, term string) *snippet {
	if text == "" {
		return nil
	}
	i := indexFold(text, term)
	if i < 0 {
		return nil
	}
	j := i + len(term)
	before, after := []rune(text[:i]), []rune(text[j:])
	s := &snippet{Match: text[i:j]}
	if len(before) > snippetContext {
		s.Before = "…" + string(before[len(before)-snippetContext:])
	} else {
		s.Before = string(before)
	}
	if len(after) > snippetContext {
		s.After = string(after[:snippetContext]) + "…"
	} else {
		s.After = string(after)
	}
	s.Before, s.After = oneLine(s.Before), oneLine(s.After)
	return s
}

// indexFold is strings.Index ignoring case, returning a byte offset into
// s whose match has the byte length of term (letters whose case forms
// differ in length are compared as they are).
func indexFold(s, term string) int {
	for i := 0; i+len(term) <= len(s); {
		if strings.EqualFold(s[i:i+len(term)], term) {
			return i
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return -1
}

// oneLine folds each run of white space to one space, so that a snippet
// reads as one line.
func oneLine(s string) string {
	return spaceRun.ReplaceAllString(s, " ")
}

var spaceRun = regexp.MustCompile(`\s+`)

// trimRune drops a rune the body prefix cut in two.
func trimRune(b []byte) []byte {
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return b
}
