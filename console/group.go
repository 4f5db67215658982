package console

import (
	"net/http"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// groupData is a failure group's page.
type groupData struct {
	G store.Group
	// Last is the group's newest replay (nil: none the viewer may see);
	// LastErr says why it could not be read.
	Last    *taskView
	LastErr string
	// R is what became of the group's replays: whether its messages died
	// again after one, and how many.
	R ops.GroupReplays
	// Waiting are the requests for approval of an action on the group,
	// or on its queue, that wait for a decision and the viewer sees.
	Waiting []ops.GroupApproval
	Back    string
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
	rs, err := c.cfg.Ops.GroupReplays(ctx, caller, g.ID)
	switch {
	case err != nil:
		if _, d.LastErr = failure(err); d.LastErr == "" {
			d.LastErr = c.internal(r, "read the group's replays", err)
		}
	default:
		d.R = rs
		if rs.Last != nil {
			v := viewTask(*rs.Last)
			d.Last = &v
		}
	}
	if d.Waiting, err = c.cfg.Ops.PendingGroupApprovals(ctx, caller, g); err != nil {
		c.renderFailure(w, r, "list the group's requests waiting for approval", err)
		return
	}
	c.render(w, r, http.StatusOK, "group", sessionFrom(ctx), groupTitle(g), d)
}

// groupTitle names a group in words: its failure and its queue.
func groupTitle(g store.Group) string {
	return groupFailure(g) + " in " + g.SourceQueue
}

// groupFailure names a group's failure alone, for sentences that name its queue
// themselves: its type (failureType) and its masked message.
func groupFailure(g store.Group) string {
	title := failureType(g.FailureType)
	if g.Pattern != "" {
		title += ": " + g.Pattern
	}
	return short(title, 120)
}

// noFailureType names the failure of a group whose messages carry no
// failure type (an expiry or a queue limit killed them, or the application
// set no failure headers).
const noFailureType = "(no failure type)"

// failureType is a group's failure type as every page names it: the
// overview, the failure groups and a group's page, the confirmation, the
// approvals and the audit (through groupFailure), so one group has one
// name.
func failureType(t string) string {
	if t == "" {
		return noFailureType
	}
	return t
}
