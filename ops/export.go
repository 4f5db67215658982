package ops

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlq/dlq/store"
)

// An export is every message a filter selects, newest first, one JSON
// line each (ExportLine), then one ExportEnd line. It reads the messages a
// page at a time (exportPage, a keyset on id like any listing) and hands
// them to the sink one by one as they are read, so its memory does not
// grow with the number of messages, and messages arriving meanwhile (with
// larger ids) never join it.
//
// Resuming: a stream that was cut has no ExportEnd line. The same request
// with cursor set to the id of the last message received continues with
// the messages older than it. cursor also takes a listing's next_cursor
// for the same filter.

// exportPage is how many messages one statement of an export reads.
const exportPage = 500

// ExportRequest asks for an export.
type ExportRequest struct {
	// Filter selects the messages; the caller's scope is added to it.
	Filter store.Filter
	// Cursor resumes: the id of the last message received, or a listing's
	// next_cursor for the same filter. Optional.
	Cursor string
}

// ExportLine is one message of an export: the message JSON, with its body
// (base64), and the origin of the dlq its id belongs to.
type ExportLine struct {
	store.Message
	// Origin is the origin of the exporting dlq's database
	// (store.Origin): with the id it names the message everywhere, unless
	// it was imported itself (imported_from names its first origin).
	Origin string `json:"origin"`
	// Redacted is set when the exporting token reads redacted values
	// (configured headers and body paths show "[redacted]"): an import
	// refuses such a line, which would store the masks as the message.
	Redacted bool `json:"redacted,omitempty"`
}

// ExportEnd is the last line of a complete export.
type ExportEnd struct {
	Export ExportSummary `json:"export"`
}

// ExportSummary says what an export held.
type ExportSummary struct {
	// Count is the number of message lines.
	Count int64 `json:"count"`
	// LastID is the id of the last (oldest) message, nil when none.
	LastID *int64 `json:"last_id"`
	// Complete is true: the line is written only when the export ended
	// with every message the filter selects.
	Complete bool `json:"complete"`
}

// ExportSink receives an export's lines.
type ExportSink interface {
	// Line writes one message line.
	Line(ExportLine) error
	// Flush is called after each page, so the reader sees progress.
	Flush() error
}

// ExportMessages streams every message the filter selects within the
// caller's scope to sink, newest first, and returns the summary for the
// ExportEnd line. An export holds bodies, so a token that may not see them
// may not export. Errors before the first line mean nothing was written;
// an error after it leaves the export cut short.
func (s *Service) ExportMessages(ctx context.Context, c Caller, r ExportRequest, sink ExportSink) (ExportSummary, error) {
	p := c.Principal
	if err := Authorize(p, ActExport); err != nil {
		return ExportSummary{}, err
	}
	if !p.Bodies {
		return ExportSummary{}, forbidden("token %s may not see message bodies, and an export holds them", p.Name)
	}
	f := r.Filter
	if err := CheckFilter(f); err != nil {
		return ExportSummary{}, err
	}
	if err := s.mayFilterBodies(p, f); err != nil {
		return ExportSummary{}, err
	}
	if err := s.checkSearch(f); err != nil {
		return ExportSummary{}, err
	}
	if err := s.checkRefs(ctx, c, f); err != nil {
		return ExportSummary{}, err
	}
	if f.Query != "" {
		// A listing says text_search_incomplete and can be read again; an
		// export would end "complete" without the messages whose words the
		// indexer has not reached, and a resume past them never sees them.
		incomplete, err := s.st.TextSearchIncomplete(ctx, f.Query)
		if err != nil {
			return ExportSummary{}, err
		}
		if incomplete {
			return ExportSummary{}, unavailable("q: more messages wait for the text index than a search reads, so an export by words would miss some; "+
				"retry once dlq_text_index_waiting is below %d (the indexer catches up by itself), or export by another filter", store.TextTailMax)
		}
	}
	before, err := exportCursor(r.Cursor, canonical(f))
	if err != nil {
		return ExportSummary{}, err
	}
	if f, err = scoped(p, f); err != nil {
		return ExportSummary{}, err
	}
	origin, err := s.st.Origin(ctx)
	if err != nil {
		return ExportSummary{}, err
	}
	var sum ExportSummary
	redacted := s.red.masks(p)
	for {
		more, last, err := s.st.EachMessage(ctx, f, store.ListOptions{Limit: exportPage, Before: before, IncludeBody: true},
			func(m store.Message) error {
				// What the API would show this principal: opened, masked
				// below the reveal role.
				s.present(p, &m)
				if m.Encryption != nil && m.Encryption.Error != "" {
					// A line without its body would import as a different
					// message: stop loudly rather than write it.
					return fmt.Errorf("export: message %d cannot be opened (%s); configure its key (docs/SECURITY.md), or go on past it with cursor=%d",
						m.ID, m.Encryption.Error, m.ID)
				}
				if err := sink.Line(ExportLine{Message: m, Origin: origin, Redacted: redacted}); err != nil {
					return err
				}
				sum.Count++
				id := m.ID
				sum.LastID = &id
				return nil
			})
		if err != nil {
			return sum, err
		}
		if err := sink.Flush(); err != nil {
			return sum, err
		}
		if !more {
			break
		}
		before = last
	}
	sum.Complete = true
	return sum, nil
}

// exportCursor reads an export's cursor: a message id (digits), or a
// listing's cursor for the same filter.
func exportCursor(cursor, key string) (int64, error) {
	if cursor == "" {
		return 0, nil
	}
	if strings.Trim(cursor, "0123456789") == "" {
		id, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || id <= 0 {
			return 0, invalid("cursor: %q is not a message id", cursor)
		}
		return id, nil
	}
	id, err := decodeCursor(cursor, key)
	if err != nil {
		return 0, invalid("cursor: %v; or give the id of the last message received", err)
	}
	return id, nil
}
