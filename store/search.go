package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MinQueryLen is the shortest q accepted: a one- or two-letter prefix
// matches too many words to be a useful search.
const MinQueryLen = 3

// searchDoc is the expression behind the full-text index
// dead_messages_search (migrations/00004_api.sql). A condition uses the
// index only if it repeats this expression exactly.
const searchDoc = "dlq_search_doc(m.message_id, m.failure_type, m.failure_message, m.headers)"

// searchConds renders the text search (q) and failure group conditions.
//
// q matches words, case-insensitively: its words must appear in that order
// in the message id, the failure type and message, or one header value
// (strings and numbers, at any depth), the last word as a prefix — all
// through one full-text index, so the cost depends on how many rows match,
// not on the table size. When the filter names a source queue, q also
// matches the body's bytes exactly (case-sensitive, any substring):
// bodies are not indexed (that would cost ingest far more than it gives),
// so a body search scans one queue's rows, best narrowed with
// failed_after.
func (f Filter) searchConds(args *sqlArgs) ([]string, error) {
	var conds []string
	if f.Group != "" {
		id, err := ParseGroupID(f.Group)
		if err != nil {
			return nil, err
		}
		conds = append(conds, "m.group_id = "+args.add(id))
	}
	if f.Query != "" {
		q := f.Query
		if !utf8.ValidString(q) || strings.IndexByte(q, 0) >= 0 {
			return nil, fmt.Errorf("%w: q must be valid UTF-8 text without NUL", ErrInvalidFilter)
		}
		if utf8.RuneCountInString(strings.TrimSpace(q)) < MinQueryLen {
			return nil, fmt.Errorf("%w: q must have at least %d characters", ErrInvalidFilter, MinQueryLen)
		}
		cond := searchDoc + " @@ dlq_search_query(" + args.add(q) + ")"
		if f.SourceQueue != "" {
			cond = "(" + cond + " OR position(" + args.add([]byte(q)) + "::bytea IN m.body) > 0)"
		}
		conds = append(conds, cond)
	}
	return conds, nil
}
