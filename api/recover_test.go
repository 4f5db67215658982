package api_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/cron"
)

// panickingCron is a cron view with a bug: it panics.
type panickingCron struct{}

func (panickingCron) Jobs(context.Context) (cron.JobsView, error) {
	var views map[string]cron.JobsView
	//lint:ignore SA5000 the panic is the point of this fake
	views["x"] = cron.JobsView{} // assignment to a nil map: a real runtime panic
	return views["x"], nil
}

func (panickingCron) Alerts(context.Context) (cron.AlertsView, error) {
	panic("alerts view exploded")
}

func (panickingCron) Policies(context.Context) (cron.PoliciesView, error) {
	panic("policies view exploded")
}

// syncBuffer is a log destination the server writes to from its
// goroutines while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHandlerPanic: a handler that panics answers 500 in the error
// envelope with its request id, the panic and its stack are logged with
// that id, and the server goes on serving.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b := setup(t, func(o *setupOpts) { o.cron = panickingCron{}; o.log = &logs })
	b.seed(t, many("orders", 2)...)

	for _, path := range []string{"/api/v1/jobs", "/api/v1/alerts", "/api/v1/jobs"} {
		r := b.do(t, "GET", path, tokViewer, nil)
		require.Equal(t, http.StatusInternalServerError, r.status, "%s: %s", path, r.body)
		require.Equal(t, "internal", r.errCode(t), "the envelope, with the header's request id")
		id := r.header.Get("X-Request-Id")
		require.Contains(t, r.errMessage(t), id, "the message gives the id to look for in the log")
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		log := logs.String()
		line := ""
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "request_id="+id) {
				line = l
			}
		}
		require.NotEmpty(t, line, "no log line with request id %s in:\n%s", id, log)
		require.Contains(t, line, "handler panicked")
		require.Contains(t, line, "path="+path)
		require.Contains(t, line, "goroutine", "the stack is logged")
		require.Contains(t, line, "panickingCron", "the stack reaches the panicking code")

		// The server still serves, on a new connection and on the same.
		r = b.do(t, "GET", "/api/v1/status", tokViewer, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	require.Contains(t, logs.String(), "assignment to entry in nil map")
	require.Contains(t, logs.String(), "alerts view exploded")
}
