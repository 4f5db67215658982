package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The bulk and single actions: every one is asked for by a form posted
// to /ui/confirm, which counts (a dry run through the layer) and shows a
// confirmation stating the count; its accept button posts the same
// selection to /ui/act, which acts.
const (
	actReplay      = "replay"
	actAcknowledge = "acknowledge"
	actDelete      = "delete"
)

// selection is what an action form asks for.
type selection struct {
	Action string
	// IDs are the selected messages, or All with Form: every message
	// the filter matches, up to MaxID.
	IDs  []int64
	All  bool
	Form filterForm
	// MaxID bounds an All selection to the snapshot the operator
	// confirmed: the newest matching message when the confirmation was
	// shown. Set by the confirmation, required to act.
	MaxID int64
	// Limit caps an All selection, oldest first (0: no cap): a partial
	// replay or acknowledge of a large group.
	Limit int64
	// Replay options.
	Rate, Delay, CanaryCount, CanaryWait int64
	TargetExchange, TargetRoutingKey     string
	Force                                bool
	// Back is the page the action came from.
	Back string
}

// maxRate and the other bounds keep the form's numbers sane; the replay
// service validates them again.
const (
	maxLimit = 100_000_000
	maxRate  = 100000
	maxDelay = 7 * 24 * 3600
)

func readSelection(v url.Values) (selection, error) {
	s := selection{Action: v.Get("action"), All: v.Get("all") == "1", Form: readFilterForm(v, "f_"),
		TargetExchange: strings.TrimSpace(v.Get("target_exchange")), TargetRoutingKey: strings.TrimSpace(v.Get("target_routing_key")),
		Force: v.Get("force") == "1", Back: safeNext(v.Get("back"))}
	switch s.Action {
	case actReplay, actAcknowledge, actDelete:
	default:
		return s, &formError{field: "action", msg: "must be replay, acknowledge or delete"}
	}
	var err error
	if s.IDs, err = formIDs(v); err != nil {
		return s, err
	}
	if s.MaxID, err = formInt(v, "max_id", 0, 0, 1<<62); err != nil {
		return s, err
	}
	for _, n := range []struct {
		dst  *int64
		name string
		hi   int64
	}{{&s.Limit, "limit", maxLimit}, {&s.Rate, "rate", maxRate}, {&s.Delay, "delay", maxDelay}, {&s.CanaryCount, "canary_count", 1000}, {&s.CanaryWait, "canary_wait", 3600}} {
		if *n.dst, err = formInt(v, n.name, 0, 0, n.hi); err != nil {
			return s, err
		}
	}
	if !s.All && len(s.IDs) == 0 {
		return s, &formError{field: "id", msg: "select at least one message, or all matching the filter"}
	}
	if s.All {
		s.IDs = nil
	} else {
		s.Limit = 0
	}
	return s, nil
}

// filter is an All selection's store filter, bounded by MaxID.
func (s selection) filter() (*store.Filter, error) {
	if !s.All {
		return nil, nil
	}
	f, err := s.Form.filter()
	if err != nil {
		return nil, err
	}
	f.MaxID = s.MaxID
	return &f, nil
}

func (s selection) replayRequest(dryRun bool) (ops.ReplayRequest, error) {
	f, err := s.filter()
	if err != nil {
		return ops.ReplayRequest{}, err
	}
	req := replay.Request{IDs: s.IDs, Filter: f, Limit: int(s.Limit), RatePerSecond: float64(s.Rate), DelaySeconds: int(s.Delay), DryRun: dryRun, Force: s.Force}
	if s.TargetExchange != "" || s.TargetRoutingKey != "" {
		req.Target = &replay.Target{Exchange: s.TargetExchange, RoutingKey: s.TargetRoutingKey}
	}
	if s.CanaryCount > 0 {
		req.Canary = &replay.Canary{Count: int(s.CanaryCount), WaitSeconds: int(s.CanaryWait)}
	}
	return ops.ReplayRequest{Request: req, Confirm: !dryRun}, nil
}

func (s selection) actionRequest(dryRun bool) (ops.ActionRequest, error) {
	f, err := s.filter()
	if err != nil {
		return ops.ActionRequest{}, err
	}
	return ops.ActionRequest{IDs: s.IDs, Filter: f, Limit: int(s.Limit), DryRun: dryRun, Confirm: !dryRun}, nil
}

// confirmData is the confirmation page.
type confirmData struct {
	S selection
	// Count is how many messages the action would change; Skipped how
	// many selected ones it would leave (with Reasons), NotFound ids
	// that are gone.
	Count, Skipped int64
	Reasons        [][2]string
	NotFound       []int64
	Verb           string
}

// handleConfirm counts what an action would do and asks to confirm it.
// For "all matching", it first takes the snapshot bound: the id of the
// newest message the filter matches now. The count and the action both
// use it, so what is acted on is what was counted, never a message that
// arrived after this page was shown.
func (c *Console) handleConfirm(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	s, err := readSelection(r.PostForm)
	if err != nil {
		c.renderFailure(w, r, "read the selection", err)
		return
	}
	if s.All {
		f, err := s.Form.filter()
		if err != nil {
			c.renderFailure(w, r, "read the filter", err)
			return
		}
		newest, err := c.cfg.Ops.ListMessages(ctx, caller, ops.ListRequest{Filter: f, Limit: 1})
		if err != nil {
			c.renderFailure(w, r, "read the selection", err)
			return
		}
		if len(newest.Messages) == 0 {
			c.renderResult(w, r, s.Back, &flash{Error: true, Text: "Nothing matches this filter: nothing to do."})
			return
		}
		s.MaxID = newest.Messages[0].ID
	}
	d := confirmData{S: s}
	switch s.Action {
	case actReplay:
		req, err := s.replayRequest(true)
		if err == nil {
			var t replay.Task
			if t, err = c.cfg.Ops.StartReplay(ctx, caller, req); err == nil {
				d.Count, d.Skipped, d.Reasons = t.Requested-t.Skipped, t.Skipped, viewTask(t).Reasons
			}
		}
		d.Verb = "Replay"
		if err != nil {
			c.renderFailure(w, r, "count the replay", err)
			return
		}
	default:
		res, err := c.acknowledgeOrDelete(ctx, caller, s, true)
		if err != nil {
			c.renderFailure(w, r, "count the selection", err)
			return
		}
		d.Count, d.Skipped, d.NotFound = res.Matched, res.Unchanged, res.NotFound
		d.Verb = map[string]string{actAcknowledge: "Acknowledge", actDelete: "Delete"}[s.Action]
	}
	c.render(w, r, http.StatusOK, "confirm", sessionFrom(ctx), d.Verb+"?", d)
}

// acknowledgeOrDelete runs the selection's acknowledge or delete (a dry
// run when dryRun: the confirm page's count).
func (c *Console) acknowledgeOrDelete(ctx context.Context, caller ops.Caller, s selection, dryRun bool) (store.ActionResult, error) {
	req, err := s.actionRequest(dryRun)
	if err != nil {
		return store.ActionResult{}, err
	}
	if s.Action == actAcknowledge {
		return c.cfg.Ops.Acknowledge(ctx, caller, req)
	}
	return c.cfg.Ops.Delete(ctx, caller, req)
}

// handleAct performs a confirmed action and shows its result.
func (c *Console) handleAct(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	s, err := readSelection(r.PostForm)
	if err == nil && s.All && s.MaxID == 0 {
		err = &formError{field: "max_id", msg: "an action on all matching messages must be confirmed first"}
	}
	if err != nil {
		c.renderFailure(w, r, "read the selection", err)
		return
	}
	if s.Action == actReplay {
		req, err := s.replayRequest(false)
		var t replay.Task
		if err == nil {
			t, err = c.cfg.Ops.StartReplay(ctx, caller, req)
		}
		if c.pending(w, r, err) {
			return
		}
		if err != nil {
			c.renderFailure(w, r, "start the replay", err)
			return
		}
		v := c.newView(sessionFrom(ctx), "replays", "Replays", replaysData{Tasks: []taskView{viewTask(t)}})
		v.Flash = &flash{Text: fmt.Sprintf("Replay %d started: %s messages requested.", t.ID, num(t.Requested))}
		c.renderView(w, r, http.StatusAccepted, "replays", "layout", v)
		return
	}
	res, err := c.acknowledgeOrDelete(ctx, caller, s, false)
	if c.pending(w, r, err) {
		return
	}
	if err != nil {
		c.renderFailure(w, r, s.Action, err)
		return
	}
	past := map[string]string{actAcknowledge: "Acknowledged", actDelete: "Deleted"}[s.Action]
	text := fmt.Sprintf("%s %s messages.", past, num(res.Changed))
	if res.Unchanged > 0 {
		text += fmt.Sprintf(" %s were already done.", num(res.Unchanged))
	}
	if len(res.NotFound) > 0 {
		text += fmt.Sprintf(" %d were not found.", len(res.NotFound))
	}
	back := s.Back
	if s.Action == actDelete && strings.HasPrefix(back, "/ui/messages/") {
		back = "/ui/messages" // the message page is gone
	}
	c.renderResult(w, r, back, &flash{Text: text})
}

// pending answers an action the layer recorded for approval instead of
// running (DLQ_APPROVAL_ABOVE): not a failure, a request waiting for a
// second principal. It reports whether err was that.
func (c *Console) pending(w http.ResponseWriter, r *http.Request, err error) bool {
	var pa *ops.PendingApproval
	if !errors.As(err, &pa) {
		return false
	}
	a := pa.Approval
	v := c.newView(sessionFrom(r.Context()), "result", "Result", resultData{Back: "/ui/"})
	v.Flash = &flash{Text: fmt.Sprintf("Waiting for approval: %s of %s messages is approval %d; another person must approve it "+
		"on the Approvals page before %s.", a.Action, num(a.Count), a.ID, fmtTime(a.ExpiresAt))}
	c.renderView(w, r, http.StatusAccepted, "result", "layout", v)
	return true
}

// resultData is the result page: the flash and the way back.
type resultData struct{ Back string }

func (c *Console) renderResult(w http.ResponseWriter, r *http.Request, back string, f *flash) {
	v := c.newView(sessionFrom(r.Context()), "result", "Result", resultData{Back: back})
	v.Flash = f
	c.renderView(w, r, http.StatusOK, "result", "layout", v)
}

// handleCancel cancels a replay task.
func (c *Console) handleCancel(w http.ResponseWriter, r *http.Request) {
	id, ok := c.pathID(w, r)
	if !ok {
		return
	}
	t, err := c.cfg.Ops.CancelReplay(r.Context(), c.caller(r), id)
	if err != nil {
		c.renderFailure(w, r, "cancel the replay", err)
		return
	}
	v := c.newView(sessionFrom(r.Context()), "replays", "Replays", replaysData{Tasks: []taskView{viewTask(t)}})
	v.Flash = &flash{Text: "Replay " + strconv.FormatInt(id, 10) + " is " + t.Status + "."}
	c.renderView(w, r, http.StatusOK, "replays", "layout", v)
}
