package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Errors of the layer, besides store.ErrNotFound, store.ErrConflict and
// *store.ConfirmError, which pass through unchanged.
var (
	// ErrForbidden: the caller's role or queue scope does not allow the
	// request. The message names the token and what it lacks.
	ErrForbidden = errors.New("forbidden")
	// ErrNoApprover: an action that needs approval is refused because no
	// configured token but its requester could give it. It is an
	// ErrForbidden (code forbidden, as documented), with the reason
	// ReasonNoApprover, so that a client can tell it from a refused token
	// or role: another token would not help, a smaller selection would.
	ErrNoApprover = fmt.Errorf("%w: nobody may approve", ErrForbidden)
	// ErrInvalid: a field of the request is refused; the message names it.
	// It also matches replay.ErrInvalidRequest and store.ErrInvalidFilter.
	ErrInvalid = errors.New("invalid request")
	// ErrUnavailable: the feature does not run on this instance (no replay
	// service, no cron service).
	ErrUnavailable = errors.New("unavailable")
)

// Error is a refusal by the layer: its kind (one of the sentinels above)
// and a message for the caller.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap lets errors.Is match the kind.
func (e *Error) Unwrap() error { return e.Kind }

func forbidden(format string, a ...any) error {
	return &Error{Kind: ErrForbidden, Msg: fmt.Sprintf(format, a...)}
}

func invalid(format string, a ...any) error {
	return &Error{Kind: ErrInvalid, Msg: fmt.Sprintf(format, a...)}
}

func unavailable(format string, a ...any) error {
	return &Error{Kind: ErrUnavailable, Msg: fmt.Sprintf(format, a...)}
}

// Codes of Classify: the public error codes the doors share.
const (
	CodeForbidden       = "forbidden"
	CodeNotFound        = "not_found"
	CodeInvalid         = "invalid_request"
	CodeConfirmRequired = "confirm_required"
	CodeConflict        = "conflict"
	CodeUnavailable     = "unavailable"
	CodeCanceled        = "canceled"
	CodeTimeout         = "timeout"
	CodeInternal        = "internal"
	// CodeApprovalPending is not a failure: the request waits for approval.
	CodeApprovalPending = "approval_pending"
)

// Classify maps an error of the layer to its public code. Doors render
// the code in their own envelope (the HTTP API's status and its
// "invalid_parameter" for CodeInvalid, the control queue's answer).
// CodeInternal means a bug or a database failure: log it.
func Classify(err error) string {
	var ce *store.ConfirmError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrApprovalPending):
		return CodeApprovalPending
	case errors.Is(err, ErrForbidden):
		return CodeForbidden
	case errors.As(err, &ce):
		return CodeConfirmRequired
	case errors.Is(err, ErrInvalid), errors.Is(err, replay.ErrInvalidRequest),
		errors.Is(err, store.ErrInvalidFilter), store.IsDataError(err):
		return CodeInvalid
	case errors.Is(err, store.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, store.ErrConflict):
		return CodeConflict
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	}
	return CodeInternal
}

// ReasonNoApprover is the reason of an ErrNoApprover refusal.
const ReasonNoApprover = "no_approver"

// Reason is the detail of a refusal beside its code, "" for none: the
// doors add it to their error object as "reason". Only a forbidden
// refusal that is not about the token or its role has one.
func Reason(err error) string {
	if errors.Is(err, ErrNoApprover) {
		return ReasonNoApprover
	}
	return ""
}

// Message is the text of err for a caller: the layer's prefixes ("store: ",
// "replay: ") and the sentinels' words ("invalid filter: ", "invalid
// request: ", which Classify already turned into the code) dropped, so that
// it starts with the parameter at fault (docs/API.md, "Errors").
func Message(err error) string {
	msg := err.Error()
	for _, p := range []string{"store: ", "replay: "} {
		if len(msg) > len(p) && msg[:len(p)] == p {
			msg = msg[len(p):]
		}
	}
	for _, sentinel := range []string{"invalid request: ", "invalid filter: "} {
		msg = strings.ReplaceAll(msg, sentinel, "")
	}
	return msg
}

// JSONField is the public name of the field a JSON decoding error names:
// encoding/json spells an embedded struct by its Go type
// ("Request.filter.ids"), which no caller ever wrote.
func JSONField(field string) string {
	parts := strings.Split(field, ".")
	public := parts[:0]
	for _, p := range parts {
		if p != "" && !unicode.IsUpper(rune(p[0])) {
			public = append(public, p)
		}
	}
	return strings.Join(public, ".")
}
