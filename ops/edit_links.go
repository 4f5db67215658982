package ops

import (
	"context"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// EditLinks ties an edit-then-replay's original and its corrected copy
// once that is stored (it died again), as the caller may see them: the
// console's message page links the one to the other.
type EditLinks struct {
	// CopyOf is the message this one is the edited copy of (its
	// x-dlq-edited-from header), 0 when it is no edit's copy; CopyOfStored
	// says whether that message is still stored where the caller sees it.
	CopyOf       int64
	CopyOfStored bool
	// Copy is the stored message that this one's edited copy became, 0
	// while none is stored that the caller sees.
	Copy int64
}

// editCopyCandidates bounds the messages that share an edited copy's
// replay id among their search keys: the copy itself, perhaps, and
// messages that quote the id in a header of their own.
const editCopyCandidates = 10

// EditLinks finds m's edit links (m as GetMessage answered it, with its
// edit). The copy is found by its replay id among the search keys
// (store.MessagesWithKey: the index on their hashes), and known by its
// x-dlq-edited-from naming m: a copy whose keys were cut before its
// replay id, or that came back from a replay of its own with another
// replay id, is not linked (the original still names its copy's replay
// id, which a search finds).
func (s *Service) EditLinks(ctx context.Context, c Caller, m store.Message) (EditLinks, error) {
	p := c.Principal
	if err := Authorize(p, ActGetMessage); err != nil {
		return EditLinks{}, err
	}
	var out EditLinks
	if from := editedFrom(m.Headers); from > 0 {
		found, err := s.st.MessagesExist(ctx, []int64{from}, p.Queues)
		if err != nil {
			return EditLinks{}, err
		}
		out.CopyOf, out.CopyOfStored = from, found[from]
	}
	e := m.Edited
	if e == nil || (e.State != store.EditSent && e.State != store.EditUnknown) {
		return out, nil
	}
	ids, err := s.st.MessagesWithKey(ctx, e.CopyReplayID, p.Queues, editCopyCandidates)
	if err != nil || len(ids) == 0 {
		return out, err
	}
	page, err := s.st.ListMessages(ctx, store.Filter{IDs: ids, Status: "all", Scope: p.Queues}, store.ListOptions{Limit: len(ids)})
	if err != nil {
		return EditLinks{}, err
	}
	for i := range page.Messages {
		cp := &page.Messages[i]
		s.open(cp)
		// The first copy stored: newest first, so the last one found.
		if cp.ID != m.ID && editedFrom(cp.Headers) == m.ID {
			out.Copy = cp.ID
		}
	}
	return out, nil
}

// editedFrom reads x-dlq-edited-from from stored headers (the typed JSON
// form): the id of the message an edited copy was made from, 0 when there
// is none or it is not an id.
func editedFrom(headers []byte) int64 {
	h, err := broker.DecodeHeadersJSON(headers)
	if err != nil {
		return 0
	}
	return max(broker.HeaderInt(h[replay.HeaderEditedFrom]), 0)
}
