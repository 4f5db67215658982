package api

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/dlq/dlq/ops"
)

// handleExport serves GET /api/v1/messages/export: application/x-ndjson,
// one message per line, then the ExportEnd line; gzip when the client
// accepts it. The status and headers go out with the first line, so an
// error found before it (a bad filter, a forbidden queue) is an ordinary
// error answer; an error after it cuts the stream short, without the end
// line, which is how a client tells a cut export from a complete one.
func (s *Server) handleExport(w http.ResponseWriter, r *http.Request) {
	q := queryOf(r)
	f, err := q.filter()
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	out := &exportWriter{w: w, gzip: acceptsGzip(r)}
	sum, err := s.cfg.Ops.ExportMessages(r.Context(), caller(r), ops.ExportRequest{Filter: f, Cursor: q.str("cursor")}, out)
	switch {
	case err != nil && !out.started:
		s.writeErr(w, r, err)
		return
	case err != nil:
		s.log.Warn("export cut short", "request_id", RequestID(r.Context()), "lines", sum.Count, "error", err)
		// The lines so far go out; then the connection is dropped, so
		// the client sees a broken response as well as no end line.
		_ = out.Flush()
		panic(http.ErrAbortHandler)
	}
	if err := out.write(ops.ExportEnd{Export: sum}); err == nil {
		out.close()
	}
}

// exportWriter writes an export's lines: JSON without HTML escaping (so
// header and body text keep their bytes), through gzip when asked.
type exportWriter struct {
	w       http.ResponseWriter
	gzip    bool
	started bool
	zw      *gzip.Writer
	bw      *bufio.Writer
	enc     *json.Encoder
}

func (e *exportWriter) start() {
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Vary", "Accept-Encoding")
	var out io.Writer = e.w
	if e.gzip {
		h.Set("Content-Encoding", "gzip")
		e.zw = gzip.NewWriter(e.w)
		out = e.zw
	}
	e.w.WriteHeader(http.StatusOK)
	e.bw = bufio.NewWriterSize(out, 64<<10)
	e.enc = json.NewEncoder(e.bw)
	e.enc.SetEscapeHTML(false)
}

func (e *exportWriter) write(v any) error {
	if !e.started {
		e.start()
	}
	return e.enc.Encode(v)
}

// Line writes one message line.
func (e *exportWriter) Line(l ops.ExportLine) error { return e.write(l) }

// Flush sends what is buffered, compressed so far, to the client.
func (e *exportWriter) Flush() error {
	if !e.started {
		return nil
	}
	if err := e.bw.Flush(); err != nil {
		return err
	}
	if e.zw != nil {
		if err := e.zw.Flush(); err != nil {
			return err
		}
	}
	return http.NewResponseController(e.w).Flush()
}

// close ends the stream: every buffered byte, and gzip's trailer.
func (e *exportWriter) close() {
	if !e.started {
		return
	}
	_ = e.bw.Flush()
	if e.zw != nil {
		_ = e.zw.Close()
	}
}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip
// (named, or *, without q=0).
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name != "gzip" && name != "*" {
				continue
			}
			q := strings.ReplaceAll(strings.ToLower(params), " ", "")
			if q == "q=0" || q == "q=0.0" || q == "q=0.00" || q == "q=0.000" {
				return false
			}
			return true
		}
	}
	return false
}

// handleImport serves POST /api/v1/messages/import (admin): an export's
// lines, gzip when the request says Content-Encoding: gzip; answers
// {"imported": n, "skipped": m}. The whole request is one transaction.
func (s *Server) handleImport(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			s.writeErr(w, r, badParam("body", "Content-Encoding is gzip, but the body is not: %v", err))
			return
		}
		defer zr.Close()
		// The limit holds for what the body unpacks to as well.
		body = http.MaxBytesReader(w, io.NopCloser(zr), s.cfg.ImportMaxBodyBytes)
	default:
		s.writeErr(w, r, badParam("Content-Encoding", "%q is not supported: send the lines as they are, or gzip", enc))
		return
	}
	res, err := s.cfg.Ops.ImportMessages(r.Context(), caller(r), body)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, res)
}
