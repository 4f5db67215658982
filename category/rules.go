package category

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The categories.
const (
	Transient = "transient"
	Permanent = "permanent"
	Unknown   = "unknown"
)

// All lists the categories.
var All = []string{Transient, Permanent, Unknown}

// Valid reports whether c is a category.
func Valid(c string) bool { return slices.Contains(All, c) }

// MaxMessageBytes is how much of a failure message the rules look at.
const MaxMessageBytes = 2048

// Rule gives Category to the messages that meet every condition it sets.
// A rule without conditions matches every message. The YAML and JSON names
// are the configuration's (recovery.categories.rules).
type Rule struct {
	// Name identifies the rule in views and errors. Required, unique.
	Name string `yaml:"name" json:"name"`
	// Category is transient, permanent or unknown (which exempts what the
	// rule matches from every later rule, the defaults included).
	// Required.
	Category string `yaml:"category" json:"category"`
	// Reasons: the death reason is one of these (rejected, expired,
	// maxlen, delivery_limit). Optional.
	Reasons []string `yaml:"reasons" json:"reasons,omitempty"`
	// Queues: the source queue is one of these. Optional.
	Queues []string `yaml:"queues" json:"queues,omitempty"`
	// Failure is a regular expression (RE2 syntax) that the failure type
	// or the failure message matches. Optional.
	Failure string `yaml:"failure" json:"failure,omitempty"`
	// FailureType is a regular expression the failure type matches.
	// Optional.
	FailureType string `yaml:"failure_type" json:"failure_type,omitempty"`
	// FailureMessage is a regular expression the failure message (its
	// first MaxMessageBytes) matches. Optional.
	FailureMessage string `yaml:"failure_message" json:"failure_message,omitempty"`
	// Headers maps a header name to a regular expression its value
	// matches: a string, a byte array holding UTF-8 text, an integer (in
	// decimal) or a boolean (true, false). A header that is missing or
	// holds anything else does not match. Optional.
	Headers map[string]string `yaml:"headers" json:"headers,omitempty"`
}

// Fields are what the rules look at in one message.
type Fields struct {
	SourceQueue    string
	Reason         string
	FailureType    string
	FailureMessage string
	// Header returns a header's value as text (HeaderText), false when
	// the message has no such header or it holds no text. Optional: nil
	// when the message has no headers.
	Header func(name string) (string, bool)
}

// Rules is a compiled, ordered rule set. It is safe for concurrent use.
type Rules struct {
	rules   []Rule
	compact []compiled
	hash    string
	headers bool
	// ac holds the case-insensitive word lists of the failure type and
	// message conditions (the defaults are all such lists).
	ac *automaton
}

type compiled struct {
	category string
	reasons  []string
	queues   []string
	failure  *matcher
	typ      *matcher
	message  *matcher
	headers  []headerCond
}

type headerCond struct {
	name string
	m    *matcher
}

// New compiles rules, followed by DefaultRules when defaults is true. Every
// problem is reported (joined), each naming its field as the YAML does:
// "rules[2].failure_message: …".
func New(rules []Rule, defaults bool) (*Rules, error) {
	all := slices.Clone(rules)
	if defaults {
		all = append(all, DefaultRules()...)
	}
	out := &Rules{rules: all, compact: make([]compiled, 0, len(all))}
	var errs []error
	names := map[string]bool{}
	for i, r := range all {
		field := fmt.Sprintf("rules[%d]", i)
		if i >= len(rules) {
			field = fmt.Sprintf("default rule %q", r.Name)
		}
		c, bad := compileRule(r, field, names)
		errs = append(errs, bad...)
		if len(c.headers) > 0 {
			out.headers = true
		}
		out.compact = append(out.compact, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out.ac = foldedWordLists(out.compact)
	hash, err := rulesHash(all)
	if err != nil {
		return nil, err
	}
	out.hash = hash
	return out, nil
}

// compileRule compiles rule r, named field in errors, and returns every
// problem it finds. names holds the names of the rules before it; r's
// name joins them.
func compileRule(r Rule, field string, names map[string]bool) (compiled, []error) {
	var errs []error
	bad := func(f, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s%s: %s", field, f, fmt.Sprintf(format, a...)))
	}
	switch {
	case r.Name == "":
		bad(".name", "required")
	case names[r.Name]:
		bad(".name", "%q is used by an earlier rule; names must be unique (a rule of yours named like a default rule replaces nothing: give it another name)", r.Name)
	}
	names[r.Name] = true
	if !Valid(r.Category) {
		bad(".category", "%q must be one of transient, permanent, unknown", r.Category)
	}
	c := compiled{category: r.Category, reasons: r.Reasons, queues: r.Queues}
	for j, s := range r.Reasons {
		if s == "" {
			bad(fmt.Sprintf(".reasons[%d]", j), "must not be empty")
		}
	}
	for j, s := range r.Queues {
		if s == "" {
			bad(fmt.Sprintf(".queues[%d]", j), "must not be empty")
		}
	}
	for _, re := range []struct {
		name string
		expr string
		dst  **matcher
	}{{"failure", r.Failure, &c.failure}, {"failure_type", r.FailureType, &c.typ}, {"failure_message", r.FailureMessage, &c.message}} {
		if re.expr == "" {
			continue
		}
		m, err := compileMatcher(re.expr)
		if err != nil {
			bad("."+re.name, "not a regular expression: %v", err)
			continue
		}
		*re.dst = m
	}
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		if name == "" {
			bad(".headers", "a header name must not be empty")
			continue
		}
		m, err := compileMatcher(r.Headers[name])
		if err != nil {
			bad(".headers."+name, "not a regular expression: %v", err)
			continue
		}
		c.headers = append(c.headers, headerCond{name: name, m: m})
	}
	return c, errs
}

// foldedWordLists gathers the case-insensitive word lists of the failure
// conditions into one automaton, each matcher numbered with its list; nil
// when there are none.
func foldedWordLists(compact []compiled) *automaton {
	var lists [][]string
	for i := range compact {
		c := &compact[i]
		for _, m := range []*matcher{c.failure, c.typ, c.message} {
			if m != nil && m.lits != nil && m.fold {
				m.ac = len(lists)
				lists = append(lists, m.lits)
			}
		}
	}
	if len(lists) > 0 {
		return newAutomaton(lists)
	}
	return nil
}

// rulesHash identifies a rule set: the first 8 bytes of the SHA-256 of
// its JSON form, in hex.
func rulesHash(all []Rule) (string, error) {
	b, err := json.Marshal(all)
	if err != nil {
		return "", fmt.Errorf("category: encode rules: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// Of returns the category of the first rule f meets, Unknown when none.
// A nil Rules categorises nothing: every message is unknown.
func (rs *Rules) Of(f Fields) string {
	c, _ := rs.Match(f)
	return c
}

// Match returns the category and the name of the first rule f meets;
// Unknown and "" when none does.
func (rs *Rules) Match(f Fields) (category, rule string) {
	if rs == nil {
		return Unknown, ""
	}
	typ := newText(f.FailureType, MaxMessageBytes)
	msg := newText(f.FailureMessage, MaxMessageBytes)
	typ.ac, msg.ac = rs.ac, rs.ac
	for i := range rs.compact {
		c := &rs.compact[i]
		if c.matches(f, typ, msg) {
			return c.category, rs.rules[i].Name
		}
	}
	return Unknown, ""
}

func (c *compiled) matches(f Fields, typ, msg *text) bool {
	if len(c.reasons) > 0 && !slices.Contains(c.reasons, f.Reason) {
		return false
	}
	if len(c.queues) > 0 && !slices.Contains(c.queues, f.SourceQueue) {
		return false
	}
	if c.failure != nil && !c.failure.match(typ) && !c.failure.match(msg) {
		return false
	}
	if c.typ != nil && !c.typ.match(typ) {
		return false
	}
	if c.message != nil && !c.message.match(msg) {
		return false
	}
	for _, h := range c.headers {
		if f.Header == nil {
			return false
		}
		v, ok := f.Header(h.name)
		if !ok || !h.m.match(newText(v, MaxMessageBytes)) {
			return false
		}
	}
	return true
}

// Hash names the rule set: two sets with the same hash categorise alike.
func (rs *Rules) Hash() string {
	if rs == nil {
		return ""
	}
	return rs.hash
}

// List returns the rules in the order they apply.
func (rs *Rules) List() []Rule {
	if rs == nil {
		return []Rule{}
	}
	return slices.Clone(rs.rules)
}

// NeedsHeaders reports whether any rule looks at headers: recomputing
// stored categories reads the headers only then.
func (rs *Rules) NeedsHeaders() bool { return rs != nil && rs.headers }
