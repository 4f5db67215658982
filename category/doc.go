// Package category sorts dead messages into failure categories: transient
// (worth retrying as it is: a timeout, a refused connection, a 503, a
// deadlock), permanent (retrying the same bytes will fail the same way: a
// body that does not deserialise, a validation error, a null reference, a
// schema mismatch) and unknown (no rule says).
//
// A category comes from ordered rules, the first that matches winning. A
// rule matches when every condition it sets holds: the death reason, the
// source queue, regular expressions over the failure type and message
// (as package broker reads them from the framework headers) and over named
// headers. The operator's rules come first, then, unless turned off, the
// defaults (DefaultRules), each of which is listed in docs/REPLAY.md.
//
// The consumer categorises every message at ingest, so this runs for every
// dead message and must stay cheap: a regular expression that is a plain
// (case-insensitive) list of words, as every default is, is not run by the
// regexp engine (two orders of magnitude slower on such alternations);
// the rule set's lists are all looked for in one pass over each text, by
// an Aho-Corasick automaton (automaton.go), which costs a fraction of a
// microsecond per message. Text that is not ASCII goes to the regexp
// engine, which folds case as Unicode does. Only the first
// MaxMessageBytes of a failure message are looked at: what went wrong is
// said at the start; the rest is detail and stack.
//
// Rules.Hash names a rule set, so that stored categories can be known to
// be stale: the cron job "categories" recomputes every stored message's
// category when the rules it runs with differ from those of the last
// completed pass.
package category
