package api

import (
	"fmt"
	"net/http"
	"runtime/debug"
)

// withRecover turns a handler's panic into a logged 500 in the error
// envelope, so one bad request neither kills the connection silently nor
// leaves the client without a request id to report. net/http would recover
// too, but only by dropping the connection and printing to stderr, outside
// the structured log.
func (s *Server) withRecover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &statusWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				// The handler's way of aborting the response on purpose.
				panic(v)
			}
			s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path,
				"request_id", RequestID(r.Context()), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if rw.wrote {
				// Part of an answer is out: abort the connection so the
				// client sees a broken response, not a complete-looking one.
				panic(http.ErrAbortHandler)
			}
			writeError(w, r, http.StatusInternalServerError, "internal",
				"internal error (request id "+RequestID(r.Context())+"; see the server log)")
		}()
		next.ServeHTTP(rw, r)
	})
}

// statusWriter records whether the response has started.
type statusWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
