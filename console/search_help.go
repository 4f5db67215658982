package console

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/dlq/dlq/ops"
)

// searchHelp says what a search reads (ops.SearchReach), in words, for the
// messages page: beside the search box, and again when a search of every
// queue found nothing. Across every queue a body is searched by the words
// of its start only (the text index holds the first BodyTextBytes of a
// text body), its bytes only within one source queue: a phrase further in
// is not found, and the page must say so rather than let "no match" read
// as "no such message".
func searchHelp(r ops.SearchReach, queue string) string {
	where := "every queue"
	if queue != "" {
		where = "queue " + queue
	}
	if r.Encrypted {
		return "Searches " + where + " for identifying values, whole: message and correlation ids, header values, " +
			"values in failure messages. Bodies and failure text are encrypted at rest and are not searched."
	}
	kib := strconv.Itoa(r.BodyTextBytes/1024) + " KiB"
	parts := []string{"ids and header values (whole)", "failure text"}
	if r.Words {
		w := "words of stacks and header values"
		if r.Bodies {
			w += " and of the first " + kib + " of each text body"
		}
		parts = append(parts, w)
	}
	if queue != "" && r.Bodies {
		parts = append(parts, "any part of each whole body, byte for byte (case-sensitive, binary bodies too)")
	}
	s := "Searches " + where + ": " + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1] + "."
	if !r.Words {
		s += " Text search is off: words of stacks, headers and bodies are found only in messages stored while it was on."
	}
	switch {
	case !r.Bodies:
		s += " Bodies are not searched: this token may not see them."
	case queue == "" && r.Words:
		s += " Text past a body's first " + kib + ", and binary bodies, are searched only within one queue: choose a source queue to search whole bodies."
	case queue == "":
		s += " Bodies are searched only within one queue: choose a source queue to search them."
	}
	return s
}

// searchHelpFor is searchHelp for the caller of r and the source queue
// the page's filter names.
func (c *Console) searchHelpFor(r *http.Request, queue string) string {
	return searchHelp(c.cfg.Ops.SearchReach(c.caller(r)), queue)
}
