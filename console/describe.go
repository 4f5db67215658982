package console

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// A selection in words: what a replay, an approval request or an audit
// row acted on, as it was asked (a failure group by its title, a queue,
// the filter's other conditions, or ids), with a link to those messages.

// phrase is a piece of the words, a link when Href is set.
type phrase struct {
	Text, Href string
}

// selectionWords is a selection in words.
type selectionWords struct {
	Phrases []phrase
	// Href lists the selected messages (the messages page with the
	// filter); "" for a selection by ids.
	Href string
}

// maxIDLinks bounds the ids named one by one.
const maxIDLinks = 10

// describeSelection puts sel in words.
func describeSelection(sel ops.SelectionView) selectionWords {
	var w selectionWords
	add := func(text, href string) { w.Phrases = append(w.Phrases, phrase{Text: text, Href: href}) }
	switch {
	case len(sel.IDs) > 0:
		add(counted(int64(len(sel.IDs)), "message")+": ", "")
		for i, id := range sel.IDs {
			if i == maxIDLinks {
				add(fmt.Sprintf(" and %d more", len(sel.IDs)-maxIDLinks), "")
				break
			}
			if i > 0 {
				add(", ", "")
			}
			add("#"+strconv.FormatInt(id, 10), "/ui/messages/"+strconv.FormatInt(id, 10))
		}
	case sel.Filter != nil:
		f := *sel.Filter
		w.Href = "/ui/messages?" + withStatus(formOf(f)).values("").Encode()
		add(statusWords(f.Status)+" ", "")
		switch g := sel.Group; {
		case g != nil:
			add("of failure group ", "")
			add("“"+groupFailure(*g)+"”", w.Href)
			add(" in queue "+g.SourceQueue, "")
		case f.Group != "":
			add("of failure group ", "")
			add(f.Group, w.Href)
			if f.SourceQueue != "" {
				add(" in queue "+f.SourceQueue, "")
			}
		case f.SourceQueue != "":
			add("of queue ", "")
			add(f.SourceQueue, w.Href)
		default:
			add("of every queue", "")
		}
		for _, c := range filterConditions(f) {
			add(", "+c, "")
		}
		if f.ReplayTask > 0 {
			add(", of ", "")
			add("replay "+strconv.FormatInt(f.ReplayTask, 10), "/ui/replays/"+strconv.FormatInt(f.ReplayTask, 10))
			if f.ReplayOutcome != "" {
				add(" that it settled "+f.ReplayOutcome, "")
			}
			if f.ReplayError != "" {
				add(" with “"+short(f.ReplayError, 120)+"”", "")
			}
		}
		if f.Approval > 0 {
			add(", of ", "")
			add("approval "+strconv.FormatInt(f.Approval, 10), "/ui/approvals/"+strconv.FormatInt(f.Approval, 10))
		}
		if f.MaxID > 0 {
			add(", up to ", "")
			add("message #"+strconv.FormatInt(f.MaxID, 10), "/ui/messages/"+strconv.FormatInt(f.MaxID, 10))
			add(" (none stored later)", "")
		}
	default:
		add("nothing named", "")
	}
	if sel.Limit > 0 {
		add(", at most "+num(int64(sel.Limit))+", oldest first", "")
	}
	return w
}

// withStatus spells out the status a listing would otherwise default: a
// link to a selection's messages shows what it selected.
func withStatus(f filterForm) filterForm {
	if f.Status == "" {
		f.Status = store.StatusPending
	}
	return f
}

func statusWords(status string) string {
	switch s := strings.TrimSpace(status); s {
	case "":
		return "pending messages"
	case "all":
		return "messages of any status"
	default:
		return strings.ReplaceAll(s, ",", " or ") + " messages"
	}
}

// filterConditions are a filter's conditions beyond status, queue and
// group, in words.
func filterConditions(f store.Filter) []string {
	var out []string
	if f.Reason != "" {
		out = append(out, "reason "+f.Reason)
	}
	if f.Category != "" {
		out = append(out, "category "+f.Category)
	}
	if f.Query != "" {
		out = append(out, "matching “"+f.Query+"”")
	}
	for _, fl := range f.Fields {
		out = append(out, "body field "+fl)
	}
	if f.FailedAfter != nil {
		out = append(out, "failed from "+fmtTime(*f.FailedAfter))
	}
	if f.FailedBefore != nil {
		out = append(out, "failed before "+fmtTime(*f.FailedBefore))
	}
	return out
}

// taskSelection is what a replay task was asked to replay.
func taskSelection(t replay.Task, groups map[string]*store.Group) ops.SelectionView {
	sel := ops.SelectionView{IDs: t.Request.IDs, Filter: t.Request.Filter, Limit: t.Request.Limit}
	if f := sel.Filter; f != nil && f.Group != "" {
		sel.Group = groups[f.Group]
	}
	return sel
}

// auditSelection reads an audit row's selection: a replay's {"filter" or
// "ids", "limit"}, or the filter itself (acknowledge, delete, approval
// requests). ok is false for the other shapes (a decision's approval_id,
// a cancel's task_id), which the page shows as they are.
func auditSelection(raw json.RawMessage) (ops.SelectionView, bool) {
	var wrapped struct {
		Filter *store.Filter `json:"filter"`
		IDs    []int64       `json:"ids"`
		Limit  int           `json:"limit"`
	}
	if json.Unmarshal(raw, &wrapped) != nil {
		return ops.SelectionView{}, false
	}
	if wrapped.Filter != nil {
		return ops.SelectionView{Filter: wrapped.Filter, Limit: wrapped.Limit}, true
	}
	var f store.Filter
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &f) != nil {
		return ops.SelectionView{}, false
	}
	for _, k := range []string{"approval_id", "task_id"} {
		if _, ok := keys[k]; ok {
			return ops.SelectionView{}, false
		}
	}
	if len(f.IDs) > 0 {
		return ops.SelectionView{IDs: f.IDs}, true
	}
	f.Scope = nil
	return ops.SelectionView{Filter: &f}, true
}

// groupsOf looks up the failure groups the filters name, once each, as
// the caller sees them (absent: not seen, or no message left).
func (c *Console) groupsOf(ctx context.Context, caller ops.Caller, filters ...*store.Filter) map[string]*store.Group {
	out := map[string]*store.Group{}
	for _, f := range filters {
		if f == nil || f.Group == "" {
			continue
		}
		if _, done := out[f.Group]; done {
			continue
		}
		out[f.Group] = nil
		if g, err := c.cfg.Ops.Group(ctx, caller, f.Group); err == nil {
			out[f.Group] = &g
		}
	}
	return out
}
