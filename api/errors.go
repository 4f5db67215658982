package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// paramError is a request parameter the API itself cannot read (a query
// value, a path id, the JSON body); the message names it. What a value
// means is the operations layer's to judge.
type paramError struct {
	param string
	msg   string
}

func (e *paramError) Error() string { return e.param + ": " + e.msg }

func badParam(param, format string, a ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, a...)}
}

// writeErr maps an error to its status and the envelope: bad input 400,
// forbidden 403, missing 404, state conflicts 409, oversize body 413,
// unavailable 503, the rest 500 (logged, with the request id to find it).
// The classification is the operations layer's (ops.Classify), shared
// with the control queue and the console.
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var (
		pe  *paramError
		mbe *http.MaxBytesError
		pa  *ops.PendingApproval
	)
	switch {
	case errors.As(err, &pa):
		// Not a failure: the request was recorded for a second principal's
		// approval instead of run.
		writeJSON(w, r, http.StatusAccepted, map[string]any{"approval": pa.Approval})
		return
	case errors.As(err, &pe):
		writeError(w, r, http.StatusBadRequest, "invalid_parameter", pe.Error())
		return
	case errors.As(err, &mbe):
		writeError(w, r, http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("request body is larger than %d bytes", mbe.Limit))
		return
	case store.IsDataError(err):
		// PostgreSQL refused a value (the layer's checks should catch it first).
		writeError(w, r, http.StatusBadRequest, "invalid_parameter", "a value was refused by the database: "+ops.Message(err))
		return
	}
	switch ops.Classify(err) {
	case ops.CodeForbidden:
		writeErrorReason(w, r, http.StatusForbidden, "forbidden", ops.Reason(err), ops.Message(err))
	case ops.CodeConfirmRequired:
		writeError(w, r, http.StatusBadRequest, "confirm_required", "confirm: "+ops.Message(err))
	case ops.CodeInvalid:
		writeError(w, r, http.StatusBadRequest, "invalid_parameter", ops.Message(err))
	case ops.CodeNotFound:
		writeError(w, r, http.StatusNotFound, "not_found", ops.Message(err))
	case ops.CodeConflict:
		writeError(w, r, http.StatusConflict, "conflict", ops.Message(err))
	case ops.CodeUnavailable:
		writeError(w, r, http.StatusServiceUnavailable, "unavailable", ops.Message(err))
	case ops.CodeCanceled:
		if r.Context().Err() != nil {
			// The client went away; nobody reads the answer.
			writeError(w, r, 499, "canceled", "request canceled")
			return
		}
		s.internal(w, r, err)
	case ops.CodeTimeout:
		writeError(w, r, http.StatusServiceUnavailable, "timeout", "the request took too long; narrow the filter")
	default:
		s.internal(w, r, err)
	}
}

func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", RequestID(r.Context()), "error", err)
	writeError(w, r, http.StatusInternalServerError, "internal", "internal error (request id "+RequestID(r.Context())+"; see the server log)")
}
