package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
)

// Control-queue commands. The first four are PRODUCT.md's contract; the
// read-only ones serve the CLI's progress display and listings; approve,
// reject and withdraw decide (or take back) requests waiting for
// approval.
const (
	CmdReplay        = "replay"
	CmdAcknowledge   = "acknowledge"
	CmdDelete        = "delete"
	CmdCancelReplay  = "cancel_replay"
	CmdReplayStatus  = "replay_status"
	CmdListReplays   = "list_replays"
	CmdListApprovals = "list_approvals"
	CmdApprove       = "approve"
	CmdReject        = "reject"
	CmdWithdraw      = "withdraw"
	CmdEditReplay    = "edit_replay"
	CmdListPolicies  = "list_policies"
	CmdPausePolicy   = "pause_policy"
	CmdResumePolicy  = "resume_policy"
)

var commandNames = []string{CmdReplay, CmdAcknowledge, CmdDelete, CmdCancelReplay, CmdReplayStatus, CmdListReplays,
	CmdListApprovals, CmdApprove, CmdReject, CmdWithdraw, CmdEditReplay, CmdListPolicies, CmdPausePolicy, CmdResumePolicy}

// ResultApprovalPending is the result label (dlq_control_commands_total)
// of a command answered ok: true with a request waiting for approval.
const ResultApprovalPending = "approval_pending"

// TokenHeader carries a control command's token.
const TokenHeader = "x-dlq-token"

// MaxCommandIDBytes bounds a command_id.
const MaxCommandIDBytes = 200

// Error codes of control answers.
const (
	CodeTooLarge        = "too_large"        // the command exceeds the size limit
	CodeInvalidJSON     = "invalid_json"     // not one JSON object of the command's shape
	CodeUnknownCommand  = "unknown_command"  // command is not one of the commands
	CodeInvalidRequest  = "invalid_request"  // a field's value is refused (the message names it)
	CodeMissingToken    = "missing_token"    // no x-dlq-token header
	CodeInvalidToken    = "invalid_token"    // the token matches no configured token
	CodeForbidden       = "forbidden"        // the token's role does not allow the command
	CodeRateLimited     = "rate_limited"     // the token sent too many commands
	CodeNotFound        = "not_found"        // no such task, or nothing matches
	CodeConflict        = "conflict"         // state forbids it, or command_id reused differently
	CodeConfirmRequired = "confirm_required" // a large replay/acknowledge/delete by filter needs confirm: true
	CodeUnavailable     = "unavailable"      // PostgreSQL failed; retry with the same command_id
	CodeInternal        = "internal"         // a bug; retry with the same command_id
)

// Command is one control-queue command: the command's name, its id, and
// the fields of the matching HTTP body.
type Command struct {
	Command   string `json:"command"`
	CommandID string `json:"command_id"`
	// The fields of POST /api/v1/replays; ids, filter and limit also serve
	// acknowledge, delete and list_replays.
	replay.Request
	// ID names a replay task (cancel_replay, replay_status) or an approval
	// request (approve, reject).
	ID int64 `json:"id,omitempty"`
	// Reason says why a request is rejected (reject) or a policy paused
	// (pause_policy). Optional.
	Reason string `json:"reason,omitempty"`
	// Name names an automatic replay policy (pause_policy,
	// resume_policy).
	Name string `json:"name,omitempty"`
	// The edit of edit_replay (id names the message; dry_run and force
	// come with the replay fields).
	BodyBase64    *string         `json:"body_base64,omitempty"`
	Body          *string         `json:"body,omitempty"`
	SetHeaders    json.RawMessage `json:"set_headers,omitempty"`
	RemoveHeaders []string        `json:"remove_headers,omitempty"`
	// Confirm lets a replay, acknowledge or delete by filter select more
	// messages than the confirmation threshold (ControlConfig.ConfirmAbove).
	Confirm bool `json:"confirm,omitempty"`
}

// CommandError is a refusal with its public code.
type CommandError struct {
	Code string `json:"code"`
	// Reason tells a forbidden refusal that is not about the token or its
	// role from one that is (ops.Reason): "no_approver".
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

func (e *CommandError) Error() string { return e.Code + ": " + e.Message }

func cmdErr(code, format string, a ...any) *CommandError {
	return &CommandError{Code: code, Message: fmt.Sprintf(format, a...)}
}

// ParseCommand decodes and checks a command's body: one JSON object, no
// unknown fields, no trailing data, at most maxBytes. It never panics and
// its cost is bounded by maxBytes. On error the returned Command holds
// whatever command and command_id could be read, for the answer.
func ParseCommand(body []byte, maxBytes int) (Command, *CommandError) {
	if len(body) > maxBytes {
		return Command{}, cmdErr(CodeTooLarge, "command is %d bytes; at most %d", len(body), maxBytes)
	}
	var c Command
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return salvage(body), cmdErr(CodeInvalidJSON, "command is not a valid JSON command object: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return salvage(body), cmdErr(CodeInvalidJSON, "command has data after its JSON object")
	}
	if len(c.SetHeaders) > 0 {
		// As it is re-encoded: a command reads the same however spaced.
		var compact bytes.Buffer
		if err := json.Compact(&compact, c.SetHeaders); err == nil {
			c.SetHeaders = compact.Bytes()
		}
	}
	if e := checkCommandID(c.CommandID); e != nil {
		c.CommandID = ""
		return c, e
	}
	if !knownCommand(c.Command) {
		name := c.Command
		c.Command = ""
		return c, cmdErr(CodeUnknownCommand, "command %.64q is not one of %s", name, strings.Join(commandNames, ", "))
	}
	return c, c.checkFields()
}

func knownCommand(name string) bool {
	for _, n := range commandNames {
		if n == name {
			return true
		}
	}
	return false
}

func checkCommandID(id string) *CommandError {
	switch {
	case id == "":
		return cmdErr(CodeInvalidRequest, "command_id is required: a unique id per command (a UUID), so that a repeated command does nothing again")
	case len(id) > MaxCommandIDBytes:
		return cmdErr(CodeInvalidRequest, "command_id is %d bytes; at most %d", len(id), MaxCommandIDBytes)
	case !utf8.ValidString(id) || strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return cmdErr(CodeInvalidRequest, "command_id must be printable UTF-8")
	}
	return nil
}

// checkFields refuses fields that mean nothing for the command, so that a
// misplaced field is an error rather than silently ignored.
func (c Command) checkFields() *CommandError {
	var u unexpected
	var e *CommandError
	switch c.Command {
	case CmdReplay:
		u.add(c.ID != 0, "id")
	case CmdAcknowledge, CmdDelete:
		u.replayOnly(c.Request)
		u.add(c.ID != 0, "id")
		// Which ids and filters are acceptable is the operations layer's
		// rule (ops.Selection), the same for every door.
	case CmdCancelReplay, CmdReplayStatus:
		e = c.taskFields(&u)
	case CmdListReplays, CmdListApprovals:
		c.listFields(&u)
	case CmdEditReplay:
		e = c.editFields(&u)
	case CmdListPolicies, CmdPausePolicy, CmdResumePolicy:
		e = c.policyFields(&u)
	case CmdApprove, CmdReject, CmdWithdraw:
		e = c.approvalFields(&u)
	}
	if e != nil {
		return e
	}
	if c.Command != CmdReject && c.Command != CmdPausePolicy && c.Reason != "" && !slices.Contains(u, "reason") {
		u = append(u, "reason")
	}
	if c.Command != CmdPausePolicy && c.Command != CmdResumePolicy {
		u.add(c.Name != "", "name")
	}
	if c.Command != CmdEditReplay {
		u.add(c.BodyBase64 != nil, "body_base64")
		u.add(c.Body != nil, "body")
		u.add(len(c.SetHeaders) > 0, "set_headers")
		u.add(len(c.RemoveHeaders) > 0, "remove_headers")
	}
	if len(u) > 0 {
		return cmdErr(CodeInvalidRequest, "%s does not take %s", c.Command, strings.Join(u, ", "))
	}
	return nil
}

// unexpected collects the names of the fields a command does not take,
// in the order they are checked: the order its refusal names them.
type unexpected []string

func (u *unexpected) add(cond bool, name string) {
	if cond {
		*u = append(*u, name)
	}
}

// replayOnly adds the fields only replay takes.
func (u *unexpected) replayOnly(r replay.Request) {
	u.add(r.RatePerSecond != 0, "rate_per_second")
	u.add(r.DelaySeconds != 0, "delay_seconds")
	u.add(r.StartAt != nil, "start_at")
	u.add(r.Target != nil, "target")
	u.add(r.Canary != nil, "canary")
	u.add(r.Force, "force")
	u.add(r.OnUnknown != "", "on_unknown")
}

// selection adds the fields that select messages (ids, filter, limit),
// for the commands that act on no selection.
func (u *unexpected) selection(r replay.Request) {
	u.add(len(r.IDs) > 0, "ids")
	u.add(r.Filter != nil, "filter")
	u.add(r.Limit != 0, "limit")
}

// taskFields checks cancel_replay and replay_status: a task's id.
func (c Command) taskFields(u *unexpected) *CommandError {
	r := c.Request
	u.replayOnly(r)
	u.selection(r)
	u.add(r.DryRun, "dry_run")
	u.add(c.Confirm, "confirm")
	if c.ID <= 0 {
		return cmdErr(CodeInvalidRequest, "%s needs id, the replay task's id (a positive number)", c.Command)
	}
	return nil
}

// listFields checks list_replays and list_approvals: a limit at most.
func (c Command) listFields(u *unexpected) {
	r := c.Request
	u.replayOnly(r)
	u.add(len(r.IDs) > 0, "ids")
	u.add(r.Filter != nil, "filter")
	u.add(r.DryRun, "dry_run")
	u.add(c.ID != 0, "id")
	u.add(c.Confirm, "confirm")
}

// editFields checks edit_replay: a message's id and its edit, with
// dry_run and force.
func (c Command) editFields(u *unexpected) *CommandError {
	r := c.Request
	u.add(r.StartAt != nil, "start_at")
	u.add(r.OnUnknown != "", "on_unknown")
	u.add(r.RatePerSecond != 0, "rate_per_second")
	u.add(r.DelaySeconds != 0, "delay_seconds")
	u.add(r.Target != nil, "target")
	u.add(r.Canary != nil, "canary")
	u.selection(r)
	u.add(c.Confirm, "confirm")
	if c.ID <= 0 {
		return cmdErr(CodeInvalidRequest, "%s needs id, the message's id (a positive number)", c.Command)
	}
	return nil
}

// policyFields checks list_policies, pause_policy and resume_policy: a
// policy's name, and a reason to pause it.
func (c Command) policyFields(u *unexpected) *CommandError {
	r := c.Request
	u.replayOnly(r)
	u.selection(r)
	u.add(r.DryRun, "dry_run")
	u.add(c.ID != 0, "id")
	u.add(c.Confirm, "confirm")
	u.add(c.Command == CmdResumePolicy && c.Reason != "", "reason")
	if c.Command != CmdListPolicies && c.Name == "" {
		return cmdErr(CodeInvalidRequest, "%s needs name, the policy's name", c.Command)
	}
	return nil
}

// approvalFields checks approve, reject and withdraw: an approval
// request's id, and a reason to reject it.
func (c Command) approvalFields(u *unexpected) *CommandError {
	r := c.Request
	u.replayOnly(r)
	u.selection(r)
	u.add(r.DryRun, "dry_run")
	u.add(c.Confirm, "confirm")
	u.add(c.Command != CmdReject && c.Reason != "", "reason")
	if c.ID <= 0 {
		return cmdErr(CodeInvalidRequest, "%s needs id, the approval request's id (a positive number)", c.Command)
	}
	return nil
}

// salvage reads command and command_id from a body that failed to decode
// as a whole, so the error answer can name them.
func salvage(body []byte) Command {
	var loose struct {
		Command   any `json:"command"`
		CommandID any `json:"command_id"`
	}
	if json.Unmarshal(body, &loose) != nil {
		return Command{}
	}
	var c Command
	if s, ok := loose.CommandID.(string); ok && checkCommandID(s) == nil {
		c.CommandID = s
	}
	if s, ok := loose.Command.(string); ok && knownCommand(s) {
		c.Command = s
	}
	return c
}

// jsonProblem describes a decoding error without echoing the input.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("syntax error at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s must be %s, not a JSON %s", ops.JSONField(typ.Field), typ.Type, typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "empty or truncated"
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return strings.TrimPrefix(msg, "json: ")
}

// Answer is a control command's answer, exactly PRODUCT.md's envelope.
type Answer struct {
	OK        bool            `json:"ok"`
	CommandID string          `json:"command_id"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *CommandError   `json:"error,omitempty"`
}

func okAnswer(commandID string, result any) (string, error) {
	r, err := json.Marshal(result)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(Answer{OK: true, CommandID: commandID, Result: r})
	return string(b), err
}

func errAnswer(commandID string, e *CommandError) string {
	b, _ := json.Marshal(Answer{OK: false, CommandID: commandID, Error: e})
	return string(b)
}

// actionOf maps each command to the operation it performs, so the
// permission table of package ops decides who may send it.
var actionOf = map[string]ops.Action{
	CmdReplay:       ops.ActStartReplay,
	CmdAcknowledge:  ops.ActAcknowledge,
	CmdDelete:       ops.ActDelete,
	CmdCancelReplay: ops.ActCancelReplay,
	CmdReplayStatus: ops.ActGetReplay,
	CmdListReplays:  ops.ActListReplays,

	CmdListApprovals: ops.ActListApprovals,
	CmdApprove:       ops.ActDecideApproval,
	CmdReject:        ops.ActDecideApproval,
	CmdWithdraw:      ops.ActWithdrawApproval,
	CmdEditReplay:    ops.ActEditReplay,

	CmdListPolicies: ops.ActListPolicies,
	CmdPausePolicy:  ops.ActPausePolicy,
	CmdResumePolicy: ops.ActPausePolicy,
}
