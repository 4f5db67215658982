package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// paramError is a bad request parameter; the message names it.
type paramError struct {
	param string
	msg   string
}

func (e *paramError) Error() string { return e.param + ": " + e.msg }

func badParam(param, format string, a ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, a...)}
}

// forbiddenError is a request naming something outside the caller's scope.
type forbiddenError struct{ msg string }

func (e *forbiddenError) Error() string { return e.msg }

// writeErr maps an error to its status and the envelope: bad input 400,
// missing 404, state conflicts 409, oversize body 413, the rest 500 (logged,
// with the request id to find it).
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var (
		pe  *paramError
		fe  *forbiddenError
		mbe *http.MaxBytesError
		ce  *store.ConfirmError
	)
	switch {
	case errors.As(err, &pe):
		writeError(w, r, http.StatusBadRequest, "invalid_parameter", pe.Error())
	case errors.As(err, &fe):
		writeError(w, r, http.StatusForbidden, "forbidden", fe.Error())
	case errors.As(err, &mbe):
		writeError(w, r, http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("request body is larger than %d bytes", mbe.Limit))
	case errors.As(err, &ce):
		writeError(w, r, http.StatusBadRequest, "confirm_required", "confirm: "+ce.Error())
	case errors.Is(err, store.ErrInvalidFilter), errors.Is(err, replay.ErrInvalidRequest):
		writeError(w, r, http.StatusBadRequest, "invalid_parameter", trimPrefix(err))
	case errors.Is(err, store.ErrNotFound):
		writeError(w, r, http.StatusNotFound, "not_found", trimPrefix(err))
	case errors.Is(err, store.ErrConflict):
		writeError(w, r, http.StatusConflict, "conflict", trimPrefix(err))
	case store.IsDataError(err):
		// PostgreSQL refused a value (the checks above should catch it first).
		writeError(w, r, http.StatusBadRequest, "invalid_parameter", "a value was refused by the database: "+trimPrefix(err))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
		writeError(w, r, 499, "canceled", "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, r, http.StatusServiceUnavailable, "timeout", "the request took too long; narrow the filter")
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", RequestID(r.Context()), "error", err)
		writeError(w, r, http.StatusInternalServerError, "internal", "internal error (request id "+RequestID(r.Context())+"; see the server log)")
	}
}

// trimPrefix drops the "store: " prefix of a store error: the message is
// for API users.
func trimPrefix(err error) string {
	msg := err.Error()
	for _, p := range []string{"store: ", "replay: "} {
		if len(msg) > len(p) && msg[:len(p)] == p {
			msg = msg[len(p):]
		}
	}
	return msg
}
