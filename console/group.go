package console

import (
	"net/http"
	"time"

	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// groupData is a failure group's page.
type groupData struct {
	G store.Group
	// Last is the group's newest replay (nil: none the viewer may see);
	// LastErr says why it could not be read.
	Last    *taskView
	LastErr string
	// FailedAgain: messages of the group died after its last replay
	// began publishing, the last at G.LastSeen.
	FailedAgain bool
	Back        string
}

// handleGroup shows one failure group: what failed and where, its
// category, its counts by status, when it was first and last seen, its
// last replay and how that went, and the actions on its pending
// messages.
func (c *Console) handleGroup(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	key := r.PathValue("key")
	g, err := c.cfg.Ops.Group(ctx, caller, key)
	if err != nil {
		c.renderFailure(w, r, "read the failure group", err)
		return
	}
	d := groupData{G: g, Back: "/ui/groups/" + g.ID}
	t, ok, err := c.cfg.Ops.LastGroupReplay(ctx, caller, g.ID)
	switch {
	case err != nil:
		if _, d.LastErr = failure(err); d.LastErr == "" {
			d.LastErr = c.internal(r, "read the group's last replay", err)
		}
	case ok:
		v := viewTask(t)
		d.Last = &v
		d.FailedAgain = failedAgain(t, g.LastSeen)
	}
	c.render(w, r, http.StatusOK, "group", sessionFrom(ctx), groupTitle(g), d)
}

// failedAgain reports whether messages of a group died after its replay
// t began publishing some of them: the replay did not fix what failed.
func failedAgain(t replay.Task, lastSeen time.Time) bool {
	if t.Published == 0 {
		return false
	}
	began := t.CreatedAt
	if t.StartAt.After(began) {
		began = t.StartAt
	}
	return lastSeen.After(began)
}

// groupTitle names a group in words: its failure and its queue.
func groupTitle(g store.Group) string {
	return groupFailure(g) + " in " + g.SourceQueue
}

// groupFailure names a group's failure alone, for sentences that name its queue
// themselves.
func groupFailure(g store.Group) string {
	title := g.FailureType
	if g.Pattern != "" {
		if title != "" {
			title += ": "
		}
		title += g.Pattern
	}
	if title == "" {
		title = "(no failure text)"
	}
	return short(title, 120)
}
