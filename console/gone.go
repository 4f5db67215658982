package console

import (
	"net/http"
	"strconv"

	"github.com/dlq/dlq/ops"
)

// goneData is the page of a message that is not stored: a link to a
// deleted message (an approval's or an audit row's "up to message #17",
// a bookmark) says what became of it.
type goneData struct {
	ID int64
	G  ops.MessageGone
	// Words is the delete's selection in words, when the page can read it.
	Words *selectionWords
	// ApprovalID is the approval request the delete carried out (0: none).
	ApprovalID int64
}

// renderGone answers a message page whose message was not found (notFound,
// the layer's answer): 404, with the layer's answer as the flash, as any
// failure, and what the layer knows of the message (deleted, by whom and
// when, from the audit). When the layer says nothing more, the plain
// failure page.
func (c *Console) renderGone(w http.ResponseWriter, r *http.Request, id int64, notFound error) {
	ctx, caller := r.Context(), c.caller(r)
	g, err := c.cfg.Ops.MessageGone(ctx, caller, id)
	if err != nil {
		if ops.Classify(err) == ops.CodeInternal {
			c.log.Warn("console: what became of a message", "id", id, "error", err, "request_id", c.cfg.RequestID(ctx))
		}
		c.renderFailure(w, r, "read the message", notFound)
		return
	}
	d := goneData{ID: id, G: g}
	if g.Deletion != nil {
		e := g.Deletion.Entry
		if sel, ok := auditSelection(e.Selection); ok {
			if sel.Filter != nil && sel.Filter.Group != "" {
				sel.Group = c.groupsOf(ctx, caller, sel.Filter)[sel.Filter.Group]
			}
			words := describeSelection(sel)
			d.Words = &words
		}
		var detail struct {
			ApprovalID int64 `json:"approval_id"`
		}
		_ = jsonUnmarshal(e.Detail, &detail)
		d.ApprovalID = detail.ApprovalID
	}
	title := "Message " + strconv.FormatInt(id, 10) + " is not stored"
	if g.Deleted {
		title = "Message " + strconv.FormatInt(id, 10) + " was deleted"
	}
	v := c.newView(sessionFrom(ctx), "gone", title, d)
	_, msg := failure(notFound)
	v.Flash = &flash{Error: true, Text: msg}
	c.renderView(w, r, http.StatusNotFound, "gone", "layout", v)
}
