package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

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
	// OnUnknown is what the task does with a publish whose outcome is
	// unknown: replay.OnUnknownRetry or replay.OnUnknownHold; empty is the
	// instance's setting (DLQ_REPLAY_ON_UNKNOWN).
	OnUnknown string
	// Back is the page the action came from.
	Back string
	// Counted is what the confirmation counted a replay would publish (-1:
	// not said): when it said none, the flash checks that again rather
	// than say "Done".
	Counted int64
}

// maxRate and the other bounds keep the form's numbers sane; the replay
// service validates them again.
const (
	maxLimit = 100_000_000
	maxRate  = 100000
	maxDelay = 7 * 24 * 3600
)

// defaultCanaryWait is the canary's watch in seconds that an absent
// canary_wait reads as: the one the replay options start from, so a form
// without the field (a failure group's) asks what the others do.
const defaultCanaryWait = int64(replay.DefaultCanaryWait / time.Second)

// numberField is one of a selection's numeric form fields: where it is
// read to, its name, what it reads as when absent (values leaves it out
// then), and its upper bound (the lower is 0).
type numberField struct {
	dst     *int64
	name    string
	def, hi int64
}

func (s *selection) numbers() []numberField {
	return []numberField{{&s.Limit, "limit", 0, maxLimit}, {&s.Rate, "rate", 0, maxRate}, {&s.Delay, "delay", 0, maxDelay},
		{&s.CanaryCount, "canary_count", 0, 1000}, {&s.CanaryWait, "canary_wait", defaultCanaryWait, 3600}}
}

func readSelection(v url.Values) (selection, error) {
	s := selection{Action: v.Get("action"), All: v.Get("all") == "1", Form: readFilterForm(v, "f_"),
		TargetExchange: strings.TrimSpace(v.Get("target_exchange")), TargetRoutingKey: strings.TrimSpace(v.Get("target_routing_key")),
		Force: v.Get("force") == "1", OnUnknown: v.Get("on_unknown"), Back: safeNext(v.Get("back"))}
	switch s.OnUnknown {
	case "", replay.OnUnknownRetry, replay.OnUnknownHold:
	default:
		return s, &formError{field: "If a publish's outcome is unknown", msg: "choose send it again or hold it"}
	}
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
	if s.Counted, err = formInt(v, "counted", -1, 0, 1<<62); err != nil {
		return s, err
	}
	for _, n := range s.numbers() {
		if *n.dst, err = formInt(v, n.name, n.def, 0, n.hi); err != nil {
			return s, err
		}
	}
	if !s.All && len(s.IDs) == 0 {
		return s, &formError{field: "id", msg: "select at least one message, or all matching the filter",
			sentence: "Select at least one message, or all matching the filter."}
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

// values is the selection as the query of its confirmation page (GET
// /ui/confirm): readSelection reads it back.
func (s selection) values() url.Values {
	v := s.Form.values("f_")
	v.Set("action", s.Action)
	if s.All {
		v.Set("all", "1")
		v.Set("max_id", strconv.FormatInt(s.MaxID, 10))
	}
	for _, id := range s.IDs {
		v.Add("id", strconv.FormatInt(id, 10))
	}
	for _, n := range s.numbers() {
		if *n.dst != n.def {
			v.Set(n.name, strconv.FormatInt(*n.dst, 10))
		}
	}
	for k, t := range map[string]string{"target_exchange": s.TargetExchange, "target_routing_key": s.TargetRoutingKey, "on_unknown": s.OnUnknown} {
		if t != "" {
			v.Set(k, t)
		}
	}
	if s.Force {
		v.Set("force", "1")
	}
	v.Set("back", s.Back)
	return v
}

func (s selection) replayRequest(dryRun bool) (ops.ReplayRequest, error) {
	f, err := s.filter()
	if err != nil {
		return ops.ReplayRequest{}, err
	}
	req := replay.Request{IDs: s.IDs, Filter: f, Limit: int(s.Limit), RatePerSecond: float64(s.Rate), DelaySeconds: int(s.Delay), DryRun: dryRun, Force: s.Force, OnUnknown: s.OnUnknown}
	req.Target = formTarget(s.TargetExchange, s.TargetRoutingKey)
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
	// many selected ones it would leave as they are (with Reasons),
	// NotFound ids that are gone.
	Count, Skipped int64
	Reasons        []string
	NotFound       []int64
	Verb           string
	// Approval says whether the action will wait for a second person's
	// approval, and who may give it.
	Approval approvalNotice
	// Target is what the broker says of a replay's target: missing, nothing
	// would be published.
	Target ops.TargetCheck
	// Words are an All selection in words (nil for ids).
	Words *selectionWords
}

// approvalNotice is ops.ApprovalNotice in the confirmation's words.
type approvalNotice struct {
	ops.ApprovalNotice
	// Who may approve it; Refused: nobody configured may.
	Who     string
	Refused bool
}

func noticeOf(n ops.ApprovalNotice) approvalNotice {
	v := approvalNotice{ApprovalNotice: n, Who: "another person"}
	switch {
	case n.Approvers == nil:
	case len(n.Approvers) == 0:
		v.Refused = true
	default:
		v.Who = strings.Join(n.Approvers, " or ")
	}
	return v
}

// handleConfirmPost takes an action's form and sends the browser to its
// confirmation page (POST-redirect-GET: the page is a GET, so Back to it
// after the action sends nothing again). For "all matching", it first
// takes the snapshot bound: the id of the newest message the filter
// matches now. The count and the action both use it, so what is acted on
// is what was counted, never a message that arrived after the operator
// asked.
func (c *Console) handleConfirmPost(w http.ResponseWriter, r *http.Request) {
	s, err := readSelection(r.PostForm)
	if fe := (*formError)(nil); errors.As(err, &fe) {
		// A mistake in the form (no row ticked, a number out of range):
		// back to the form's page, which says what to change in its words.
		c.redirectWithFlash(w, r, s.Back, say(flashError, fe.words()))
		return
	}
	if err != nil {
		c.renderFailure(w, r, "read the selection", err)
		return
	}
	if !c.bindSnapshot(w, r, &s) {
		return
	}
	http.Redirect(w, r, "/ui/confirm?"+s.values().Encode(), http.StatusSeeOther)
}

// bindSnapshot gives an All selection that has no snapshot bound yet its
// bound (MaxID): the id of the newest message its filter matches. It
// reports false when it has answered the browser instead: an error, or
// the news that nothing matches.
func (c *Console) bindSnapshot(w http.ResponseWriter, r *http.Request, s *selection) bool {
	if !s.All || s.MaxID != 0 {
		return true
	}
	f, err := s.Form.filter()
	if err != nil {
		c.renderFailure(w, r, "read the filter", err)
		return false
	}
	newest, err := c.cfg.Ops.ListMessages(r.Context(), c.caller(r), ops.ListRequest{Filter: f, Limit: 1})
	if err != nil {
		c.renderFailure(w, r, "read the selection", err)
		return false
	}
	if len(newest.Messages) == 0 {
		if r.Method == http.MethodGet {
			c.renderError(w, r, sessionFrom(r.Context()), http.StatusNotFound, "Nothing matches this filter: nothing to do.")
		} else {
			c.redirectWithFlash(w, r, s.Back, say(flashError, "Nothing matches this filter: nothing to do."))
		}
		return false
	}
	s.MaxID = newest.Messages[0].ID
	return true
}

// handleConfirm counts what an action would do (a dry run through the
// layer), says whether it will need approval and who can give it, and
// asks to confirm it.
func (c *Console) handleConfirm(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	s, err := readSelection(r.URL.Query())
	if err != nil {
		c.renderFailure(w, r, "read the selection", err)
		return
	}
	if !c.bindSnapshot(w, r, &s) {
		return
	}
	d := confirmData{S: s, Words: c.confirmWords(r, s)}
	// selected is what the layer's approval threshold counts (a replay's
	// remaining messages; the messages an acknowledge or delete would
	// change), so that the notice says what the layer will do.
	var selected int64
	switch s.Action {
	case actReplay:
		req, err := s.replayRequest(true)
		if err == nil {
			var t replay.Task
			if t, err = c.cfg.Ops.StartReplay(ctx, caller, req); err == nil {
				d.Count, d.Skipped, d.Reasons = t.Requested-t.Skipped, t.Skipped, viewTask(t).Reasons
				selected = t.Remaining
			}
			if err == nil && t.Error != "" {
				// The dry run says the replay would be refused (too many
				// messages): offering to confirm it only led to that.
				c.renderError(w, r, sessionFrom(ctx), http.StatusBadRequest,
					"This replay cannot start: "+t.Error+". Narrow the selection (a queue, a failure group, a time range) and try again.")
				return
			}
		}
		d.Verb = "Replay"
		if err != nil {
			c.renderFailure(w, r, "count the replay", err)
			return
		}
		d.Target = c.checkTarget(ctx, r, caller, formTarget(s.TargetExchange, s.TargetRoutingKey))
	default:
		res, err := c.acknowledgeOrDelete(ctx, caller, s, true)
		if err != nil {
			c.renderFailure(w, r, "count the selection", err)
			return
		}
		// Matched includes the selected messages already acknowledged
		// (Unchanged): they are left as they are, not counted as changed.
		d.Count, d.Skipped, d.NotFound = res.Matched-res.Unchanged, res.Unchanged, res.NotFound
		if res.Unchanged > 0 {
			d.Reasons = []string{num(res.Unchanged) + " already acknowledged"}
		}
		selected = d.Count
		d.Verb = map[string]string{actAcknowledge: "Acknowledge", actDelete: "Delete"}[s.Action]
	}
	d.Approval = noticeOf(c.cfg.Ops.NoticeApproval(caller, s.Action, selected))
	c.render(w, r, http.StatusOK, "confirm", sessionFrom(ctx), d.Verb+"?", d)
}

// confirmWords puts an All selection in words as the approvals and
// replays pages do (its failure group by its title, not its key; its
// queue; the filter's other conditions), so that the operator confirms
// what they recognise. The snapshot bound is left out: the page says "as
// of now" instead. nil for a selection by ids, or a filter the dry run
// refuses anyway.
func (c *Console) confirmWords(r *http.Request, s selection) *selectionWords {
	if !s.All {
		return nil
	}
	f, err := s.Form.filter()
	if err != nil {
		return nil
	}
	sel := ops.SelectionView{Filter: &f, Limit: int(s.Limit)}
	sel.Group = c.groupsOf(r.Context(), c.caller(r), &f)[f.Group]
	w := describeSelection(sel)
	return &w
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

// handleAct performs a confirmed action and sends the browser back to the
// page it came from, with what it did in the flash. A refusal is shown at
// once with its status (nothing was done, so nothing can be sent twice).
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
		c.actReplay(w, r, s)
		return
	}
	done := c.acknowledgedAmong(ctx, caller, s)
	back := c.backAfter(ctx, caller, s)
	res, err := c.acknowledgeOrDelete(ctx, caller, s, false)
	if c.pending(w, r, s.Back, err) {
		return
	}
	if err != nil {
		c.renderFailure(w, r, s.Action, err)
		return
	}
	c.redirectWithFlash(w, r, back, say(flashDone, actedParts(s, res, done)...))
}

// actReplay starts a confirmed replay and returns to the page it came
// from.
func (c *Console) actReplay(w http.ResponseWriter, r *http.Request, s selection) {
	nothing := c.nothingToPublish(r, s)
	req, err := s.replayRequest(false)
	var t replay.Task
	if err == nil {
		t, err = c.cfg.Ops.StartReplay(r.Context(), c.caller(r), req)
	}
	if c.pending(w, r, s.Back, err) {
		return
	}
	if err != nil {
		c.renderFailure(w, r, "start the replay", err)
		return
	}
	if nothing != nil {
		t.Remaining, t.SkipReasons = 0, nothing.SkipReasons
	}
	kind, parts := c.startedWords(r, c.caller(r), t)
	c.redirectWithFlash(w, r, s.Back, say(kind, parts...))
}

// pending answers an action the layer recorded for approval instead of
// running (DLQ_APPROVAL_ABOVE): not a failure and not done, a request
// waiting for a second person, whom it names. It reports whether err was
// that.
func (c *Console) pending(w http.ResponseWriter, r *http.Request, back string, err error) bool {
	var pa *ops.PendingApproval
	if !errors.As(err, &pa) {
		return false
	}
	a := pa.Approval
	who := "another person"
	if names := c.cfg.Ops.ApproversOf(a); len(names) > 0 {
		who = strings.Join(names, " or ")
	}
	c.redirectWithFlash(w, r, back, say(flashWaiting, fmt.Sprintf("Waiting for approval by %s: the %s of %s is ", who, a.Action, counted(a.Count, "message")),
		approvalLink(a.ID), fmt.Sprintf(", until %s. Nothing has run yet; you may withdraw it on the Approvals page.", soonWords(a.ExpiresAt, time.Now()))))
	return true
}

// handleCancel cancels a replay task and returns to the page it was on.
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
	c.redirectWithFlash(w, r, backOf(r, "/ui/replays/"+strconv.FormatInt(id, 10)),
		say(flashDone, "Cancel: ", taskLink(id), " is "+t.Status+"."))
}

// counted is "1 message" or "3 messages": n with the word that fits it
// (one word: an s is added for the plural; two: the singular and the
// plural).
func counted(n int64, word ...string) string {
	w := word[0]
	switch {
	case n != 1 && len(word) > 1:
		w = word[1]
	case n != 1:
		w += "s"
	}
	return num(n) + " " + w
}
