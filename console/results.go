package console

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// What an acknowledge or delete did, in the flash of the page it returns
// to.

// maxNamed is how many ids an acknowledge's or a delete's result names,
// each a link.
const maxNamed = 10

// acknowledgedAmong reads which of the few ids an acknowledge selects are
// acknowledged already, so that its result can name what it acknowledged
// apart from what it left (nil when it names none, or cannot tell).
func (c *Console) acknowledgedAmong(ctx context.Context, caller ops.Caller, s selection) []int64 {
	if s.Action != actAcknowledge || len(s.IDs) == 0 || len(s.IDs) > maxNamed {
		return nil
	}
	page, err := c.cfg.Ops.ListMessages(ctx, caller, ops.ListRequest{Filter: store.Filter{IDs: s.IDs, Status: store.StatusAcknowledged}, Limit: len(s.IDs)})
	if err != nil {
		return nil
	}
	var done []int64
	for _, m := range page.Messages {
		done = append(done, m.ID)
	}
	slices.Sort(done)
	return done
}

// actedParts is the result of an acknowledge or delete in words: how many
// it changed and, for a few ids, which, apart from those an acknowledge
// found acknowledged already (done, read before it ran). The ids
// are named only when the counts bear the reading out (nothing changed
// in between).
func actedParts(s selection, res store.ActionResult, done []int64) []any {
	past := map[string]string{actAcknowledge: "Acknowledged", actDelete: "Deleted"}[s.Action]
	parts := []any{past + " " + counted(res.Changed, "message")}
	var acted []int64
	// A delete names what it deleted too: each link leads to the page
	// that says the message was deleted, by whom and when.
	named := len(s.IDs) > 0 && len(s.IDs) <= maxNamed && int64(len(done)) == res.Unchanged
	if named {
		for _, id := range s.IDs {
			if !slices.Contains(done, id) && !slices.Contains(res.NotFound, id) && !slices.Contains(acted, id) {
				acted = append(acted, id)
			}
		}
		named = int64(len(acted)) == res.Changed
	}
	if named && len(acted) > 0 {
		parts = appendLinks(append(parts, ": "), acted)
	}
	parts = append(parts, ".")
	if res.Unchanged > 0 {
		parts = append(parts, " "+counted(res.Unchanged, "was", "were")+" already acknowledged")
		if named {
			parts = appendLinks(append(parts, ": "), done)
		}
		parts = append(parts, ".")
	}
	if len(res.NotFound) > 0 {
		parts = append(parts, fmt.Sprintf(" %s not found.", counted(int64(len(res.NotFound)), "was", "were")))
	}
	return parts
}

// appendLinks appends a link to each message, separated by commas.
func appendLinks(parts []any, ids []int64) []any {
	for i, id := range ids {
		if i > 0 {
			parts = append(parts, ", ")
		}
		parts = append(parts, messageLink(id))
	}
	return parts
}

// backAfter is where an acknowledge or delete returns: the page it came
// from, but for a delete from a message's own page, which will be gone,
// the listing of the message's queue (read before it is deleted; the
// unfiltered listing when it cannot be read). The flash links the
// deleted message's page, which says what became of it (gone.go).
func (c *Console) backAfter(ctx context.Context, caller ops.Caller, s selection) string {
	if s.Action != actDelete || !strings.HasPrefix(s.Back, "/ui/messages/") {
		return s.Back
	}
	if len(s.IDs) == 1 && strings.TrimPrefix(s.Back, "/ui/messages/") == strconv.FormatInt(s.IDs[0], 10) {
		if m, err := c.cfg.Ops.GetMessage(ctx, caller, s.IDs[0]); err == nil && m.SourceQueue != "" {
			return "/ui/messages?" + url.Values{"source_queue": {m.SourceQueue}}.Encode()
		}
	}
	return "/ui/messages"
}
