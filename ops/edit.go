package ops

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"slices"
	"strings"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// EditRequest is the body of POST /api/v1/messages/{id}/edit-replay and
// the fields of the control queue's edit_replay command.
type EditRequest struct {
	// BodyBase64 is the new body, base64. Any body may be edited so.
	BodyBase64 *string `json:"body_base64,omitempty"`
	// Body is the new body as text, for a JSON or text message only.
	Body *string `json:"body,omitempty"`
	// SetHeaders adds or replaces headers, in the typed form the message
	// JSON shows them in (numbers as {"type","value"}).
	SetHeaders json.RawMessage `json:"set_headers,omitempty"`
	// RemoveHeaders drops headers.
	RemoveHeaders []string `json:"remove_headers,omitempty"`
	// Force allows changing a header of the configured sensitive list.
	Force bool `json:"force,omitempty"`
	// DryRun shows exactly what would be sent and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// PreviewedReplayID is the copy's x-dlq-replay-id as a preview (a
	// dry run) showed it. The id is never chosen by the caller: it is
	// derived from the database, the message and its edits so far (editCopyID).
	// A send given the previewed id only checks it: a send whose id
	// differs (the message was edited since the preview) is refused, so
	// that what goes out carries the id that was shown. The console's
	// edit form carries it; the API, the control queue and the CLI do not.
	PreviewedReplayID string `json:"-"`
}

// EditResult answers an edit-then-replay: the copy as it is (or would be)
// published, the diff the audit row records, and the task publishing it.
type EditResult struct {
	MessageID int64 `json:"message_id"`
	DryRun    bool  `json:"dry_run"`
	// Task publishes the copy; absent for a dry run.
	Task *replay.Task   `json:"task,omitempty"`
	Copy EditedCopy     `json:"copy"`
	Diff map[string]any `json:"diff"`
}

// EditedCopy is the corrected copy, exactly as published.
type EditedCopy struct {
	ReplayID   string          `json:"replay_id"`
	Exchange   string          `json:"exchange"`
	RoutingKey string          `json:"routing_key"`
	Properties json.RawMessage `json:"properties"`
	Headers    json.RawMessage `json:"headers"`
	Body       []byte          `json:"body"`
}

// lockedHeader reports why header k may not be edited, or "" if it may:
// dlq's own headers, the broker's death and delivery headers, and the
// configured ones.
func (s *Service) lockedHeader(k string) string {
	lk := strings.ToLower(k)
	switch {
	case strings.HasPrefix(lk, "x-dlq-"):
		return "dlq's own header"
	case lk == "x-death" || lk == "x-delivery-count" || lk == "x-acquired-count" ||
		strings.HasPrefix(lk, "x-first-death-") || strings.HasPrefix(lk, "x-last-death-"):
		return "set by RabbitMQ"
	case slices.ContainsFunc(s.cfg.EditLockedHeaders, func(h string) bool { return strings.EqualFold(h, k) }):
		return "locked by configuration (replay.edit_locked_headers)"
	}
	return ""
}

func (s *Service) sensitiveHeader(k string) bool {
	return slices.ContainsFunc(s.cfg.EditSensitiveHeaders, func(h string) bool { return strings.EqualFold(h, k) })
}

// EditReplay publishes a corrected copy of a pending message (operator):
// a new body and/or header changes. The copy carries x-dlq-edited-from and
// its own replay id; the original is kept, leaves the pending set once the
// copy is out, and links to it (GetMessage's "edited"). One edit at a
// time: a message already edited, or being edited, is store.ErrConflict —
// edit the copy once it is stored instead.
func (s *Service) EditReplay(ctx context.Context, c Caller, id int64, r EditRequest) (EditResult, error) {
	p := c.Principal
	if err := Authorize(p, ActEditReplay); err != nil {
		return EditResult{}, err
	}
	if s.cfg.Replays == nil {
		return EditResult{}, unavailable("replays are not available on this instance")
	}
	m, err := s.st.GetMessage(ctx, id, p.Queues)
	if err != nil {
		return EditResult{}, err
	}
	// The copy is made of the real values, whatever the caller may see.
	s.open(&m)
	if m.Encryption != nil && m.Encryption.Error != "" {
		return EditResult{}, fmt.Errorf("message %d cannot be read, so it cannot be edited: %s: %w", id, m.Encryption.Error, store.ErrConflict)
	}
	after, err := s.editable(ctx, m)
	if err != nil {
		return EditResult{}, err
	}
	edit, diff, err := s.checkEdit(m, r)
	if err != nil {
		return EditResult{}, err
	}
	origin, err := s.st.Origin(ctx)
	if err != nil {
		return EditResult{}, err
	}
	if err := stampCopyID(origin, m, after, r, &edit, diff); err != nil {
		return EditResult{}, err
	}
	var body []byte
	if m.Body != nil {
		body = *m.Body
	}
	claimed := store.ClaimedMessage{ID: m.ID, SourceQueue: m.SourceQueue, SourceExchange: m.SourceExchange,
		SourceRoutingKey: m.SourceRoutingKey, Properties: m.Properties, Headers: m.Headers, Body: body, ReplayCount: m.ReplayCount}
	pub, err := replay.EditedPublishing(claimed, edit, s.cfg.KeepUserID)
	if err != nil {
		return EditResult{}, invalid("%v", err)
	}
	headers, err := broker.AppendHeadersJSON(nil, pub.Headers)
	if err != nil {
		return EditResult{}, invalid("set_headers: %v", err)
	}
	out := EditResult{MessageID: id, DryRun: r.DryRun, Diff: diff, Copy: EditedCopy{
		ReplayID: edit.ReplayID, Exchange: m.SourceExchange, RoutingKey: m.SourceRoutingKey,
		Properties: m.Properties, Headers: headers, Body: pub.Body,
	}}
	// The caller sees the copy as it may see any message.
	if !p.Bodies {
		out.Copy.Body = nil
	}
	if s.red.masks(p) {
		out.Copy.Headers = s.red.headersJSON(out.Copy.Headers)
		if out.Copy.Body != nil && len(s.red.paths) > 0 {
			out.Copy.Body = s.red.body(out.Copy.Body, contentType(m.Properties))
		}
	}
	if r.DryRun {
		return out, nil
	}
	// Force: the loop guard (replay.max_replays) stops blind repeats of
	// the same failing message; the corrected copy is a new message the
	// operator chose to send after looking at it, and the guard would skip
	// it (with advice to use force, which the edit's own force — sensitive
	// headers — could never give).
	task, err := s.cfg.Replays.Start(ctx, replay.Request{IDs: []int64{id}, Scope: p.Queues, Force: true, Edit: &edit, EditAfterTask: after, EditAudit: diff}, c.actor())
	if err != nil {
		return EditResult{}, err
	}
	out.Task = &task
	s.log.Info("edit-then-replay started", "message_id", id, "task_id", task.ID, "copy_replay_id", edit.ReplayID, "actor", p.Name, "via", c.Via)
	return out, nil
}

// editable checks that m may be edited now: pending, and not edited
// already unless that edit sent nothing (failed: not delivered, skipped,
// or its task ended first — cancelled), which may be redone; the store
// checks again under the edit's lock. after is the task of the edit this
// one follows (0: none), part of the copy's id, so that a redo of a failed
// edit — whose copy may have gone out after all — never reuses its id;
// the store refuses the edit if another was recorded since.
func (s *Service) editable(ctx context.Context, m store.Message) (after int64, err error) {
	prev, edited, err := s.st.GetMessageEdit(ctx, m.ID)
	if err != nil {
		return 0, err
	}
	if edited && prev.State != store.EditFailed {
		return 0, fmt.Errorf("message %d is already edited (copy %s, %s): edit the copy once it is stored: %w",
			m.ID, prev.CopyReplayID, prev.State, store.ErrConflict)
	}
	if m.Status != store.StatusPending {
		return 0, fmt.Errorf("message %d is %s; only a pending message is edited: %w", m.ID, m.Status, store.ErrConflict)
	}
	if edited {
		after = prev.TaskID
	}
	return after, nil
}

// stampCopyID gives the copy of m its derived replay id (editCopyID),
// in edit and its audit diff. A send given the id a preview showed is
// refused when that is not the id now: the message was edited since the
// preview (the copy would follow another edit). The refusal names no id, so that it tells the caller nothing
// of other messages.
func stampCopyID(origin string, m store.Message, after int64, r EditRequest, edit *replay.Edit, diff map[string]any) error {
	edit.ReplayID = editCopyID(origin, m.ID, after, m.SourceExchange, m.SourceRoutingKey)
	diff["copy_replay_id"] = edit.ReplayID
	if !r.DryRun && r.PreviewedReplayID != "" && !strings.EqualFold(strings.TrimSpace(r.PreviewedReplayID), edit.ReplayID) {
		return fmt.Errorf("the message changed since the preview: preview again: %w", store.ErrConflict)
	}
	return nil
}

// checkEdit validates an edit of m, and returns it (without its replay
// id) with its audit diff: header changes in full; for the body, the
// sizes and a hash, never the content.
func (s *Service) checkEdit(m store.Message, r EditRequest) (replay.Edit, map[string]any, error) {
	edit := replay.Edit{RemoveHeaders: r.RemoveHeaders}
	diff := map[string]any{"message_id": m.ID}
	if r.BodyBase64 == nil && r.Body == nil && len(r.SetHeaders) == 0 && len(r.RemoveHeaders) == 0 {
		return edit, nil, invalid("body: nothing to change: give body_base64 (or body), set_headers or remove_headers")
	}
	props, err := broker.ParsePropertiesJSON(m.Properties)
	if err != nil {
		return edit, nil, fmt.Errorf("ops: stored properties of message %d: %w", m.ID, err)
	}
	body, err := newBody(r, props.ContentType)
	if err != nil {
		return edit, nil, err
	}
	if body != nil && m.Body != nil {
		if body, err = s.red.restoreBody(body, *m.Body, props.ContentType); err != nil {
			return edit, nil, err
		}
	}
	if body != nil {
		d := map[string]any{"size_before": m.BodySize, "size_after": len(body)}
		if !s.st.Encrypted() && !s.bodyHidesFromAudit(body, props.ContentType) {
			// An unkeyed hash of the body would let a reader of the audit
			// log test guesses of a body that is sealed everywhere else.
			sum := sha256.Sum256(body)
			d["sha256_after"] = hex.EncodeToString(sum[:])
		}
		diff["body"] = d
		edit.Body = body
	}
	check := func(field, k string) error {
		if why := s.lockedHeader(k); why != "" {
			return invalid("%s: header %q cannot be edited: %s", field, k, why)
		}
		if s.sensitiveHeader(k) && !r.Force {
			return invalid("%s: header %q is sensitive (replay.edit_sensitive_headers): resend with force: true to change it", field, k)
		}
		return nil
	}
	for _, k := range r.RemoveHeaders {
		if err := check("remove_headers", k); err != nil {
			return edit, nil, err
		}
	}
	if len(r.RemoveHeaders) > 0 {
		diff["headers_removed"] = r.RemoveHeaders
	}
	if len(r.SetHeaders) > 0 {
		set, err := broker.DecodeHeadersJSON(r.SetHeaders)
		if err != nil {
			return edit, nil, invalid("set_headers: %v (give an object of headers in the message JSON's typed form)", err)
		}
		for k := range set {
			if err := check("set_headers", k); err != nil {
				return edit, nil, err
			}
			if slices.Contains(r.RemoveHeaders, k) {
				return edit, nil, invalid("set_headers: header %q is also in remove_headers", k)
			}
		}
		if set, err = s.restoreHeaders(m, set); err != nil {
			return edit, nil, err
		}
		if len(set) > 0 {
			if edit.SetHeaders, err = broker.AppendHeadersJSON(nil, set); err != nil {
				return edit, nil, invalid("set_headers: %v", err)
			}
			diff["headers_set"] = s.auditHeaders(set)
		}
	}
	if body == nil && len(edit.SetHeaders) == 0 && len(r.RemoveHeaders) == 0 {
		return edit, nil, invalid("set_headers: nothing to change: the headers set hold only the placeholder of masked values")
	}
	return edit, diff, nil
}

// bodyHidesFromAudit reports whether a new body holds values that a
// reader of the audit log may not see: a masked path has a value in it
// (one restored from the placeholder, or given), and the least role that
// reads the audit is masked. An unkeyed hash of such a body, in the
// answer or the audit row, would let that reader test guesses of the
// masked values (a card number has few enough): the diff keeps only the
// sizes then. The caller, who may edit, reads the audit too, so a masked
// caller never gets the hash either.
func (s *Service) bodyHidesFromAudit(body []byte, contentType string) bool {
	if !s.red.masks(auth.Principal{Role: RoleFor(ActAudit)}) {
		return false
	}
	return !bytes.Equal(s.red.body(body, contentType), body)
}

// restoreHeaders drops from set the masked headers an edit sends back as
// the placeholder: the copy keeps their real values. A placeholder for a
// header the message does not have is refused.
func (s *Service) restoreHeaders(m store.Message, set amqp.Table) (amqp.Table, error) {
	if s.red == nil {
		return set, nil
	}
	var orig amqp.Table
	for k, v := range set {
		if str, ok := v.(string); !ok || str != RedactedValue || !s.red.header(k) {
			continue
		}
		if orig == nil {
			var err error
			if orig, err = broker.DecodeHeadersJSON(m.Headers); err != nil {
				return nil, fmt.Errorf("ops: stored headers of message %d: %w", m.ID, err)
			}
		}
		if _, ok := orig[k]; !ok {
			return nil, invalid("set_headers: header %q holds %q, the placeholder of a masked value, but the message has no such header to keep: give the real value or leave it out",
				k, RedactedValue)
		}
		delete(set, k)
	}
	return set, nil
}

// auditHeaders is what the audit row records of the headers an edit
// sets: their values, masked where configured; only their names when
// encryption is on (the audit log is not sealed).
func (s *Service) auditHeaders(set amqp.Table) any {
	if s.st.Encrypted() {
		names := make([]string, 0, len(set))
		for k := range set {
			names = append(names, k)
		}
		slices.Sort(names)
		return names
	}
	hj, err := broker.AppendHeadersJSON(nil, set)
	if err != nil {
		return nil
	}
	return json.RawMessage(s.red.headersJSON(hj))
}

// textMedia reads a content type: JSON (application/json, +json) or text
// (text/*), whose new bodies an edit takes as text; media is its type.
func textMedia(contentType string) (media string, isJSON, isText bool) {
	media, _, _ = mime.ParseMediaType(contentType)
	return media, media == "application/json" || strings.HasSuffix(media, "+json"), strings.HasPrefix(media, "text/")
}

// TextBodyEdit reports whether an edit of the message with these
// properties may send its new body as text (EditRequest.Body): its content
// type is JSON or text. Any other takes body_base64, even when its bytes
// happen to be text (a front door that shows them as text encodes them).
func TextBodyEdit(properties json.RawMessage) bool {
	_, isJSON, isText := textMedia(contentType(properties))
	return isJSON || isText
}

// newBody reads the new body: body_base64 for any message, body (text)
// for a JSON or text one. A JSON message's body must be valid JSON, a text
// message's valid UTF-8: the copy goes to a consumer that expects them.
func newBody(r EditRequest, contentType string) ([]byte, error) {
	media, isJSON, isText := textMedia(contentType)
	var body []byte
	switch {
	case r.BodyBase64 != nil && r.Body != nil:
		return nil, invalid("body: give body_base64 or body, not both")
	case r.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*r.BodyBase64)
		if err != nil {
			return nil, invalid("body_base64: not valid base64: %v", err)
		}
		body = b
	case r.Body != nil:
		if !isJSON && !isText {
			return nil, invalid("body: the message's content type is %q, not JSON or text: send the new body as body_base64", contentType)
		}
		body = []byte(*r.Body)
	default:
		return nil, nil
	}
	switch {
	case isJSON:
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return nil, invalid("body: the content type is %s, and the new body is not valid JSON: %s", media, jsonPosition(body, err))
		}
	case isText && !utf8.Valid(body):
		return nil, invalid("body: the content type is %s, and the new body is not valid UTF-8", media)
	}
	return body, nil
}

// jsonPosition says where a JSON body is wrong: line, column and byte.
func jsonPosition(body []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return err.Error()
	}
	off := int(se.Offset)
	line, col := 1, 1
	for _, b := range body[:min(off, len(body))] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("%v at line %d, column %d (byte %d)", se, line, col, off)
}

// FailureDetailHeaders names the headers of a stored header table (the
// message JSON's typed form) that describe its failure in a framework's
// convention (broker.IsFailureDetailHeader), sorted: what an edit drops
// by default, so that the corrected copy does not carry a stale
// exception into its next attempt.
func FailureDetailHeaders(headers json.RawMessage) []string {
	h, err := broker.DecodeHeadersJSON(headers)
	if err != nil {
		return nil
	}
	var out []string
	for k := range h {
		if broker.IsFailureDetailHeader(k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
