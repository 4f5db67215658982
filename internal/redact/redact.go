package redact

import (
	"net/url"
	"slices"
	"strings"
)

// Mask replaces every hidden part. It is what net/url's Redacted writes, so
// messages read the same whichever path built them.
const Mask = "xxxxx"

// shownKeys are the parameter names whose values are shown: settings of
// libpq, pgx and amqp091 that never hold a secret. Matched exactly, before
// any decoding, so that a spelling one parser decodes differently from
// another is hidden.
var shownKeys = []string{
	// PostgreSQL (libpq and pgx).
	"application_name", "client_encoding", "connect_timeout", "database", "dbname",
	"default_query_exec_mode", "description_cache_capacity", "fallback_application_name",
	"host", "hostaddr", "pool_health_check_period", "pool_max_conn_idle_time",
	"pool_max_conn_lifetime", "pool_max_conn_lifetime_jitter", "pool_max_conns",
	"pool_min_conns", "pool_min_idle_conns", "port", "sslmode", "sslnegotiation",
	"statement_cache_capacity", "target_session_attrs", "user",
	// AMQP (amqp091-go).
	"auth_mechanism", "channel_max", "connection_timeout", "frame_max", "heartbeat",
	"locale", "server_name_indication",
}

func shown(key string) bool { return slices.Contains(shownKeys, key) }

// URL returns s, a connection string (AMQP or PostgreSQL URL, or
// PostgreSQL keyword=value string), with its password and the values of
// parameters that may be secret replaced by Mask. See the package doc for
// the rules. A string without any of them comes back unchanged.
func URL(s string) string {
	var spans []span
	// net/url reads a query after the first '?' of any string, URL or not.
	if q := strings.IndexByte(s, '?'); q >= 0 {
		spans = querySpans(spans, s, q+1)
	}
	if at, ok := authorityStart(s); ok {
		spans = urlSpans(spans, s, at)
	} else if end := strings.IndexByte(s+"?", '?'); !strings.Contains(s[:end], "=") {
		// A URL that lost its "//" ("postgres//dlq:pw@db", "guest:pw@h")
		// is no parser's URL, but a reader sees its user info before the
		// '@' all the same: hide all of it.
		if i := strings.LastIndexByte(s[:end], '@'); i >= 0 {
			spans = append(spans, span{0, i})
		}
	}
	// pgx reads every string without one of these exact prefixes as
	// keyword=value, whatever it looks like.
	if !strings.HasPrefix(s, "postgres://") && !strings.HasPrefix(s, "postgresql://") {
		spans = keywordValueSpans(spans, s)
	}
	return apply(s, spans)
}

// Webhook returns the scheme and host of a receiver URL, or "<invalid url>"
// when it has no host. The rest (user info, path, query, fragment) may be
// the receiver's credential and is never shown: see the package doc.
func Webhook(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "<invalid url>"
	}
	return u.Scheme + "://" + u.Host
}

// span is a range [from, to) of the input to replace by Mask. An empty span
// inserts Mask (an empty password is shown as hidden, not as empty).
type span struct{ from, to int }

const spaces = " \t\n\r\v\f"

// authorityStart reports where the authority of a URL begins: after
// "scheme://" or a leading "//", leading white space allowed (no parser
// accepts it, but a reader would still see a URL).
func authorityStart(s string) (int, bool) {
	i := len(s) - len(strings.TrimLeft(s, spaces))
	rest := s[i:]
	if j := schemeEnd(rest); j > 0 {
		i += j + 1 // past the ':'
		rest = s[i:]
	}
	if !strings.HasPrefix(rest, "//") {
		return 0, false
	}
	return i + 2, true
}

// schemeEnd returns the index of the ':' ending a URL scheme at the start
// of s (RFC 3986: a letter, then letters, digits, '+', '-', '.'), or -1.
func schemeEnd(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':':
			return i
		default:
			return -1
		}
	}
	return -1
}

// urlSpans hides the password of the URL whose authority begins at start,
// and the query values that may be secret.
func urlSpans(spans []span, s string, start int) []span {
	rest := s[start:]
	end := strings.IndexByte(rest, '/')
	if end < 0 {
		end = len(rest)
	}
	// The query begins where each parser thinks it does: net/url at the
	// first '?' (see URL), pgx at the first '?' after the first '@' before
	// the path, and past the user info hidden here, at the first '?' after
	// the last such '@'. Pairs split at '&' whatever the start, so reading
	// the query from each start hides every value any of them would read.
	var queries []int
	if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
		// The user name ends at the first ':' (every parser agrees), or at
		// a '?' or '#' where net/url would end the authority.
		if i := strings.IndexAny(rest[:at], ":?#"); i >= 0 {
			spans = append(spans, span{start + i + 1, start + at})
		}
		queries = append(queries, start+strings.IndexByte(rest, '@')+1, start+at+1)
	}
	for _, from := range queries {
		if q := strings.IndexByte(s[from:], '?'); q >= 0 {
			spans = querySpans(spans, s, from+q+1)
		}
	}
	return spans
}

// querySpans hides the values of the query that begins at from and runs to
// the end: '#' is not an end, pgx reads it as part of the query.
func querySpans(spans []span, s string, from int) []span {
	for from <= len(s) {
		to := strings.IndexByte(s[from:], '&')
		if to < 0 {
			to = len(s)
		} else {
			to += from
		}
		pair := s[from:to]
		if key, _, ok := strings.Cut(pair, "="); ok {
			if !shown(key) {
				spans = append(spans, span{from + len(key) + 1, to})
			}
		} else if pair != "" {
			spans = append(spans, span{from, to}) // a bare token may be one
		}
		from = to + 1
	}
	return spans
}

// keywordValueSpans hides the values of keyword=value pairs, read as pgx
// reads them (pgconn's parseKeywordValueSettings): a keyword up to '=', then
// a value either quoted with ' (backslash escapes) or running to the next
// white space (backslash escapes). Where pgx would give up, everything from
// the failing value on is hidden.
func keywordValueSpans(spans []span, s string) []span {
	i := len(s) - len(strings.TrimLeft(s, spaces))
	for i < len(s) {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return spans // no '=' left: nothing more is a value
		}
		key := strings.Trim(s[i:i+eq], spaces)
		i += eq + 1
		if key == "" || strings.ContainsAny(key, spaces) {
			return append(spans, span{i, len(s)})
		}
		i += len(s[i:]) - len(strings.TrimLeft(s[i:], spaces))
		from := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return append(spans, span{from, len(s)}) // unterminated
			}
			i++ // the closing quote
			if i < len(s) && !strings.ContainsRune(spaces, rune(s[i])) {
				// Text glued to the quote ("password=''0=") would join the
				// mask into one unquoted value when read back: hide it all.
				return append(spans, span{from, len(s)})
			}
		} else {
			for i < len(s) && !strings.ContainsRune(spaces, rune(s[i])) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		// A keyword holding "://" is a URL pgx misreads as keyword=value;
		// its query is urlSpans' business.
		if !shown(key) && !strings.Contains(key, "://") {
			spans = append(spans, span{from, i})
		}
		i += len(s[i:]) - len(strings.TrimLeft(s[i:], spaces))
	}
	return spans
}

// apply writes s with every span replaced by Mask; overlapping and touching
// spans become one.
func apply(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	var b strings.Builder
	pos := 0
	for i := 0; i < len(spans); {
		cur := spans[i]
		for i++; i < len(spans) && spans[i].from <= cur.to; i++ {
			cur.to = max(cur.to, spans[i].to)
		}
		b.WriteString(s[pos:cur.from])
		b.WriteString(Mask)
		pos = cur.to
	}
	b.WriteString(s[pos:])
	return b.String()
}
