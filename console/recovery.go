package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// The recovery screens: requests waiting for a second principal's
// approval, and edit-then-replay of one message. Like every page, they
// only show what the layer answers and post what the operator asked for;
// ops decides who may approve what (never the requester) and what an edit
// may change.

// approvalsData is the approvals page, or one request's page.
type approvalsData struct {
	Approvals []approvalView
	// One is set on a request's own page.
	One bool
	// Target is, on a waiting replay request's own page, what the broker
	// says of its target now: missing, approving it would publish nothing.
	Target ops.TargetCheck
}

// approvalView is a request with its selection in words.
type approvalView struct {
	ops.ApprovalView
	Source selectionWords
}

// WaitingFor names who may decide a pending request.
func (v approvalView) WaitingFor() string {
	switch {
	case v.Approvers == nil:
		return "another person"
	case len(v.Approvers) == 0:
		return "nobody configured now (it will expire unless a token that may approve it is configured)"
	}
	return strings.Join(v.Approvers, " or ")
}

// approvalOutcome is what an approved request did (its result: a replay's
// task, or an acknowledge's or a delete's store.ActionResult).
type approvalOutcome struct {
	TaskID    int64  `json:"task_id"`
	Action    string `json:"action"`
	Changed   int64  `json:"changed"`
	Unchanged int64  `json:"unchanged"`
	Gone      int64  `json:"gone"`
	Replaying int64  `json:"replaying"`
}

// Left says, for an acknowledge or delete that changed fewer messages
// than its request counted (count), why it left the others: already
// acknowledged, deleted since, being replayed; a result recorded before
// it said why counts the rest as no longer selected.
func (o approvalOutcome) Left(count int64) []string {
	var out []string
	for _, n := range []struct {
		n    int64
		what string
	}{{o.Unchanged, " already acknowledged"}, {o.Gone, " deleted since it was asked for"}, {o.Replaying, " being replayed"}} {
		if n.n > 0 {
			out = append(out, counted(n.n, "was", "were")+n.what)
		}
	}
	if rest := count - o.Changed - o.Unchanged - o.Gone - o.Replaying; rest > 0 {
		out = append(out, counted(rest, "was", "were")+" no longer selected for it")
	}
	return out
}

func readApprovalResult(raw json.RawMessage) approvalOutcome {
	var o approvalOutcome
	_ = jsonUnmarshal(raw, &o)
	return o
}

// NowVerb is what approving the request does to a message, in words.
func (v approvalView) NowVerb() string {
	switch v.Action {
	case store.ActionAcknowledge:
		return "acknowledged"
	case store.ActionDelete:
		return "deleted"
	}
	return "replayed"
}

// NowSkipped says, by reason, the messages a replay approved now would
// skip.
func (v approvalView) NowSkipped() []string {
	if v.Now == nil {
		return nil
	}
	return skipWords(v.Now.Skipped)
}

func viewApproval(a ops.ApprovalView) approvalView {
	v := approvalView{ApprovalView: a}
	v.Source = describeSelection(a.Selection)
	return v
}

// handleApprovals lists the requests the caller may see, newest first,
// each with what it selects in words, a sample and a link to its
// messages, and the controls the layer lets the caller use.
func (c *Console) handleApprovals(w http.ResponseWriter, r *http.Request) {
	list, err := c.cfg.Ops.ApprovalViews(r.Context(), c.caller(r), 100)
	if err != nil {
		c.renderFailure(w, r, "list approval requests", err)
		return
	}
	d := approvalsData{}
	for _, a := range list {
		d.Approvals = append(d.Approvals, viewApproval(a))
	}
	c.render(w, r, http.StatusOK, "approvals", sessionFrom(r.Context()), "Approvals", d)
}

// handleApproval shows one request (the flash's links lead here).
func (c *Console) handleApproval(w http.ResponseWriter, r *http.Request) {
	id, ok := c.pathID(w, r)
	if !ok {
		return
	}
	a, err := c.cfg.Ops.ApprovalViewOf(r.Context(), c.caller(r), id, isRefresh(r))
	if err != nil {
		c.renderFailure(w, r, "read the approval request", err)
		return
	}
	d := approvalsData{Approvals: []approvalView{viewApproval(a)}, One: true}
	if a.Status == store.ApprovalPending && a.Replay != nil {
		d.Target = c.checkTarget(r.Context(), r, c.caller(r), a.Replay.Target)
	}
	title := "Approval " + strconv.FormatInt(id, 10)
	if a.Status != store.ApprovalPending {
		// Decided (or expired), the request no longer changes: its page
		// is not refreshed, and an open page's refresh that finds it
		// decided is the last (X-DLQ-Refresh-Done).
		c.renderView(w, r, http.StatusOK, "approvals", "layout", c.newView(sessionFrom(r.Context()), "approvals", title, d))
		return
	}
	c.render(w, r, http.StatusOK, "approvals", sessionFrom(r.Context()), title, d)
}

// handleDecide approves, rejects or withdraws a request, as the form's
// button says, and returns to the page it came from.
func (c *Console) handleDecide(w http.ResponseWriter, r *http.Request) {
	id, ok := c.pathID(w, r)
	if !ok {
		return
	}
	caller := c.caller(r)
	var (
		a   store.Approval
		err error
	)
	decision := r.PostForm.Get("decision")
	switch decision {
	case "approve":
		a, err = c.cfg.Ops.Approve(r.Context(), caller, id)
	case "reject":
		a, err = c.cfg.Ops.Reject(r.Context(), caller, id, strings.TrimSpace(r.PostForm.Get("reason")))
	case "withdraw":
		a, err = c.cfg.Ops.Withdraw(r.Context(), caller, id)
	default:
		c.renderFailure(w, r, "decide the request", &formError{field: "decision", msg: "must be approve, reject or withdraw"})
		return
	}
	if err != nil {
		c.renderFailure(w, r, decision+" approval "+strconv.FormatInt(id, 10), err)
		return
	}
	kind, parts := c.decidedWords(r, caller, a)
	c.redirectWithFlash(w, r, backOf(r, "/ui/approvals"), say(kind, parts...))
}

// decidedWords is the flash of a decided request: what approving it did,
// as its result says (what an acknowledge or delete changed and why it
// left the others; a replay's task, as the flash of a replay started by
// hand says it), or that it will not run.
func (c *Console) decidedWords(r *http.Request, caller ops.Caller, a store.Approval) (string, []any) {
	parts := []any{approvalLink(a.ID), fmt.Sprintf(" is %s: the %s of %s", a.Status, a.Action, counted(a.Count, "message"))}
	if a.Status != store.ApprovalApproved {
		return flashDone, append(parts, " will not run.")
	}
	o := readApprovalResult(a.Result)
	if o.TaskID > 0 {
		t, err := c.cfg.Ops.GetReplay(r.Context(), caller, o.TaskID)
		if err != nil {
			// The request ran; only its task's state is not known here.
			return flashDone, append(parts, " runs as ", taskLink(o.TaskID), ".")
		}
		kind, started := c.startedWords(r, caller, t)
		return kind, append([]any{approvalLink(a.ID), " is approved. "}, started...)
	}
	if o.Action == "" {
		return flashDone, append(parts, " ran.")
	}
	past := map[string]string{store.ActionAcknowledge: "acknowledged", store.ActionDelete: "deleted"}[a.Action]
	parts = append(parts, " ran: "+counted(o.Changed, "message")+" "+past)
	if left := o.Left(a.Count); len(left) > 0 {
		parts = append(parts, "; of the others, "+strings.Join(left, ", "))
	}
	return flashDone, append(parts, ".")
}

// editData is the edit form and, after a preview, the copy it would send.
type editData struct {
	M store.Message
	// Body is the new body as typed (text, JSON formatted) or as base64
	// (binary).
	Body       string
	Binary     bool
	SetHeaders string
	Remove     string
	Force      bool
	// DropFailure drops the message's failure headers (FailureHeaders)
	// from the copy: on by default.
	DropFailure    bool
	FailureHeaders []string
	// ReplayID is the copy's replay id as the last preview showed it,
	// posted back with the form so that the send is refused when its copy
	// would get another (the message or the edit changed since): ops
	// derives the id, the form never chooses it. "" before the first
	// preview.
	ReplayID string
	Preview  *ops.EditResult
	// BodyDiff and HeadersDiff compare the copy with the original, line
	// by line (JSON formatted).
	BodyDiff, HeadersDiff []diffLine
	Back                  string
}

// handleEditForm shows the edit form of a pending message, its body as
// text when it is text (JSON formatted), else as base64.
func (c *Console) handleEditForm(w http.ResponseWriter, r *http.Request) {
	id, m, ok := c.pathMessage(w, r)
	if !ok {
		return
	}
	d := editData{M: m, Back: "/ui/messages/" + strconv.FormatInt(id, 10), SetHeaders: "{}", DropFailure: true,
		FailureHeaders: ops.FailureDetailHeaders(m.Headers)}
	if m.Body != nil {
		d.Body, d.Binary = editableBody(*m.Body)
	}
	c.render(w, r, http.StatusOK, "edit", sessionFrom(r.Context()), "Edit and replay message "+strconv.FormatInt(id, 10), d)
}

// editableBody is a body as the form shows it: formatted JSON when it is
// JSON, text when it is UTF-8 without control characters other than white
// space, else base64.
func editableBody(b []byte) (string, bool) {
	s := string(b)
	if strings.ToValidUTF8(s, "\uFFFD") == s && !strings.ContainsFunc(s, func(r rune) bool {
		return r < 0x20 && r != '\n' && r != '\r' && r != '\t'
	}) {
		if pretty, ok := indentJSON(b); ok {
			return pretty, false
		}
		return s, false
	}
	return base64.StdEncoding.EncodeToString(b), true
}

// indentJSON formats a JSON text two spaces a level; ok is false for
// anything else.
func indentJSON(b []byte) (string, bool) {
	if !looksJSON(b) || !json.Valid(b) {
		return "", false
	}
	var out bytes.Buffer
	if json.Indent(&out, bytes.TrimSpace(b), "", "  ") != nil {
		return "", false
	}
	return out.String(), true
}

// editedBody is the body to send for the text typed into the form: nil
// when it is the original's (the same text, or the same JSON however it
// is spaced), so that only the headers change; the typed JSON compacted
// when the original was compact (one line), so that an edit changes
// values, not the layout the application sent; else the text as typed.
func editedBody(original []byte, typed string) *string {
	if typed == string(original) {
		return nil
	}
	if json.Valid(original) && json.Valid([]byte(typed)) {
		var a, b bytes.Buffer
		if json.Compact(&a, original) == nil && json.Compact(&b, []byte(typed)) == nil {
			if a.String() == b.String() {
				return nil
			}
			if !bytes.ContainsRune(bytes.TrimSpace(original), '\n') {
				s := b.String()
				return &s
			}
		}
	}
	return &typed
}

// handleEdit previews (the form's preview button: a dry run showing
// exactly what would be sent, and how it differs from the original) or
// sends the corrected copy.
func (c *Console) handleEdit(w http.ResponseWriter, r *http.Request) {
	id, ok := c.pathID(w, r)
	if !ok {
		return
	}
	f := r.PostForm
	d := editData{Body: f.Get("body"), Binary: f.Get("binary") == "1", SetHeaders: strings.TrimSpace(f.Get("set_headers")),
		Remove: f.Get("remove_headers"), Force: f.Get("force") == "1", DropFailure: f.Get("drop_failure") == "1",
		ReplayID: f.Get("replay_id"), Back: "/ui/messages/" + strconv.FormatInt(id, 10)}
	req := ops.EditRequest{Force: d.Force, DryRun: f.Get("send") != "1", PreviewedReplayID: d.ReplayID}
	caller := c.caller(r)
	m, err := c.cfg.Ops.GetMessage(r.Context(), caller, id)
	if err != nil {
		c.renderFailure(w, r, "read the message", err)
		return
	}
	d.M = m
	d.FailureHeaders = ops.FailureDetailHeaders(m.Headers)
	switch {
	case d.Binary:
		req.BodyBase64 = &d.Body
	case m.Body != nil:
		req.Body = editedBody(*m.Body, d.Body) // nil: the body was left as it was, change headers only
		if req.Body != nil && !ops.TextBodyEdit(m.Properties) {
			// Shown as text because its bytes are UTF-8, but the message
			// has no text content type (often none): the layer takes its
			// new body as bytes.
			b64 := base64.StdEncoding.EncodeToString([]byte(*req.Body))
			req.BodyBase64, req.Body = &b64, nil
		}
	default:
		req.Body = &d.Body
	}
	if d.SetHeaders != "" && d.SetHeaders != "{}" {
		req.SetHeaders = []byte(d.SetHeaders)
	}
	for _, h := range strings.Split(d.Remove, ",") {
		if h = strings.TrimSpace(h); h != "" {
			req.RemoveHeaders = append(req.RemoveHeaders, h)
		}
	}
	if d.DropFailure {
		for _, h := range d.FailureHeaders {
			if !slices.Contains(req.RemoveHeaders, h) {
				req.RemoveHeaders = append(req.RemoveHeaders, h)
			}
		}
	}
	res, err := c.cfg.Ops.EditReplay(r.Context(), caller, id, req)
	if err != nil {
		// The form comes back as it was sent, with what was wrong.
		status, msg := failure(err)
		if status == http.StatusInternalServerError {
			msg = c.internal(r, "edit the message", err)
		}
		msg = editLabelize(msg)
		v := c.newView(sessionFrom(r.Context()), "edit", "Edit and replay message "+strconv.FormatInt(id, 10), d)
		v.Flash = &flash{Error: true, Text: msg}
		c.renderView(w, r, status, "edit", "layout", v)
		return
	}
	if req.DryRun {
		d.Preview, d.ReplayID = &res, res.Copy.ReplayID
		if m.Body != nil {
			old, _ := editableBody(*m.Body)
			cp, _ := editableBody(res.Copy.Body)
			d.BodyDiff = lineDiff(old, cp)
		}
		oldH, _ := indentJSON(m.Headers)
		newH, _ := indentJSON(res.Copy.Headers)
		d.HeadersDiff = lineDiff(oldH, newH)
		c.render(w, r, http.StatusOK, "edit", sessionFrom(r.Context()), "Edit and replay message "+strconv.FormatInt(id, 10), d)
		return
	}
	c.redirectWithFlash(w, r, d.Back, say(flashDone, "The corrected copy of ", messageLink(id), " is on its way: ", taskLink(res.Task.ID),
		", copy "+res.Copy.ReplayID+"."))
}

// editField finds the API field an edit's error starts with.
var editField = regexp.MustCompile(`^(Invalid: )(body_base64|body|set_headers|remove_headers):`)

// editLabels are the edit form's labels for the API's fields.
var editLabels = map[string]string{"body_base64": "New body (base64)", "body": "New body",
	"set_headers": "Headers to set", "remove_headers": "Headers to remove"}

// editPhrases rewrite the layer's advice, written for the API, in the
// edit form's words.
var editPhrases = strings.NewReplacer(
	"give body_base64 (or body), set_headers or remove_headers", "change the New body, the Headers to set or the Headers to remove",
	"resend with force: true to change it", "tick “Change sensitive headers (force)” to change it",
	"is also in remove_headers", "is also in Headers to remove",
	"send the new body as body_base64", "this form edits bodies of those types only (the API takes any body as body_base64)",
)

// editLabelize rewrites an error of an edit in the form's words: the
// fields by their labels, not by the API's names.
func editLabelize(msg string) string {
	msg = editField.ReplaceAllStringFunc(msg, func(m string) string {
		sub := editField.FindStringSubmatch(m)
		return sub[1] + editLabels[sub[2]] + ":"
	})
	return editPhrases.Replace(msg)
}
