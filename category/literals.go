package category

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxLiterals bounds the expansion of a regular expression into the
// strings it matches; past it the expression is left to the regexp engine.
const maxLiterals = 512

// matcher is one compiled regular expression of a rule.
type matcher struct {
	re *regexp.Regexp
	// lits, when not nil, are exactly the strings re matches (re is
	// unanchored, so it matches a text containing one of them); lower-cased
	// when fold, in which case they are compared with the lower-cased
	// text, and only for ASCII text: (?i)k also matches the Kelvin sign.
	lits []string
	fold bool
	// ac is the matcher's list in its rule set's automaton, -1 when it
	// is not in it.
	ac int
}

func compileMatcher(expr string) (*matcher, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	m := &matcher{re: re, ac: -1}
	if lits, fold, ok := literalSet(expr); ok {
		m.lits, m.fold = lits, fold
	}
	return m, nil
}

func (m *matcher) match(t *text) bool {
	if m.lits == nil || (m.fold && !t.isASCII()) {
		return m.re.MatchString(t.s)
	}
	if m.ac >= 0 && t.ac != nil {
		if t.found == nil {
			t.found = t.ac.find(t.s)
		}
		return t.found[m.ac/64]&(1<<(m.ac%64)) != 0
	}
	s := t.s
	if m.fold {
		s = t.lowered()
	}
	for _, l := range m.lits {
		if strings.Contains(s, l) {
			return true
		}
	}
	return false
}

// text is one field of a message being categorised, lower-cased at most
// once however many rules look at it.
type text struct {
	s      string
	lower  string
	hasLow bool
	ascii  int8 // 0 not looked at yet, 1 ASCII, -1 not
	// ac finds every word list of the rule set in one pass; found is
	// what it found, once asked.
	ac    *automaton
	found []uint64
}

// newText takes at most limit bytes of s, cut on a rune boundary so that
// the regexp engine sees whole characters.
func newText(s string, limit int) *text {
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return &text{s: s}
}

func (t *text) isASCII() bool {
	if t.ascii == 0 {
		t.ascii = 1
		for i := 0; i < len(t.s); i++ {
			if t.s[i] >= utf8.RuneSelf {
				t.ascii = -1
				break
			}
		}
	}
	return t.ascii > 0
}

func (t *text) lowered() string {
	if !t.hasLow {
		t.lower, t.hasLow = strings.ToLower(t.s), true
	}
	return t.lower
}

// literalSet returns the strings expr matches when it is built of ASCII
// literals only, with alternation, concatenation, groups and optional
// parts ("timeout|timed? out"), all case-insensitive (fold) or all
// case-sensitive. Anything else (repetition, anchors, \b, classes beyond
// case variants of a few letters) is not ok.
func literalSet(expr string) (lits []string, fold bool, ok bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, false, false
	}
	e := expander{}
	set, ok := e.expand(re.Simplify())
	if !ok || len(set) == 0 {
		return nil, false, false
	}
	return dedupe(set), e.mode == modeFold, true
}

const (
	modeUnset = iota
	modeFold
	modeExact
)

type expander struct{ mode int }

// setMode records whether letters compare case-insensitively; mixing both
// within one expression is not a plain list of words.
func (e *expander) setMode(fold bool) bool {
	m := modeExact
	if fold {
		m = modeFold
	}
	if e.mode == modeUnset {
		e.mode = m
	}
	return e.mode == m
}

func (e *expander) expand(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return []string{""}, true
	case syntax.OpLiteral:
		var b strings.Builder
		for _, r := range re.Rune {
			if r >= utf8.RuneSelf {
				return nil, false
			}
			if isLetter(r) {
				if !e.setMode(re.Flags&syntax.FoldCase != 0) {
					return nil, false
				}
				if e.mode == modeFold {
					r = lowerASCII(r)
				}
			}
			b.WriteRune(r)
		}
		return []string{b.String()}, true
	case syntax.OpCharClass:
		return e.class(re.Rune)
	case syntax.OpCapture:
		return e.expand(re.Sub[0])
	case syntax.OpQuest:
		s, ok := e.expand(re.Sub[0])
		return append(s, ""), ok
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			s, ok := e.expand(sub)
			if !ok || len(out)+len(s) > maxLiterals {
				return nil, false
			}
			out = append(out, s...)
		}
		return out, true
	case syntax.OpConcat:
		out := []string{""}
		for _, sub := range re.Sub {
			s, ok := e.expand(sub)
			if !ok || len(out)*len(s) > maxLiterals {
				return nil, false
			}
			next := make([]string, 0, len(out)*len(s))
			for _, a := range out {
				for _, b := range s {
					next = append(next, a+b)
				}
			}
			out = next
		}
		return out, true
	}
	return nil, false
}

// class expands a character class of a few ASCII characters. The parser
// turns "a|b" into [ab], and (?i) literals it factors out into classes of
// a letter's two cases.
func (e *expander) class(ranges []rune) ([]string, bool) {
	var runes, other []rune
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if hi-lo >= 16 || len(runes)+len(other)+int(hi-lo)+1 > 32 {
			return nil, false
		}
		for r := lo; r <= hi; r++ {
			if r >= utf8.RuneSelf {
				other = append(other, r)
			} else {
				runes = append(runes, r)
			}
		}
	}
	has := func(r rune) bool {
		for _, x := range runes {
			if x == r {
				return true
			}
		}
		return false
	}
	// (?i)s is [Ssſ] and (?i)k [KkK]: a non-ASCII rune that folds to a
	// letter of the class is what case-insensitivity added. Text that is
	// not ASCII goes to the regexp engine, so leaving it out is exact.
	for _, r := range other {
		folds := false
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < utf8.RuneSelf && has(f) {
				folds = true
			}
		}
		if !folds {
			return nil, false
		}
	}
	var out []string
	for _, r := range runes {
		if isLetter(r) {
			// Both cases of each letter: a case-insensitive class.
			both := has(lowerASCII(r)) && has(upperASCII(r))
			if !e.setMode(both) {
				return nil, false
			}
			if both {
				r = lowerASCII(r)
			}
		}
		out = append(out, string(r))
	}
	return dedupe(out), true
}

func isLetter(r rune) bool { return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') }

func lowerASCII(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

func upperASCII(r rune) rune {
	if r >= 'a' && r <= 'z' {
		return r - 'a' + 'A'
	}
	return r
}

func dedupe(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
