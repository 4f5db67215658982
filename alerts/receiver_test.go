package alerts

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// receiver is a real HTTP server standing in for a webhook, Slack or
// Alertmanager. It answers with the given status codes in turn (the last one
// repeats) and records every request.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	reqs     []recordedRequest
}

type recordedRequest struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	t.Helper()
	if len(statuses) == 0 {
		statuses = []int{http.StatusOK}
	}
	r := &receiver{statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, recordedRequest{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Body: body})
		status := r.statuses[min(len(r.reqs)-1, len(r.statuses)-1)]
		r.mu.Unlock()
		w.WriteHeader(status)
		if status >= 300 {
			_, _ = io.WriteString(w, http.StatusText(status))
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []recordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedRequest(nil), r.reqs...)
}

// body decodes the n-th request body into v.
func (r *receiver) body(t *testing.T, n int, v any) {
	t.Helper()
	reqs := r.requests()
	require.Greater(t, len(reqs), n, "request %d was not received", n)
	require.NoError(t, json.Unmarshal(reqs[n].Body, v), string(reqs[n].Body))
}

// sampleAlerts returns, made by Evaluate as receivers get them, a firing
// alert (pending_count on orders, fired at t0+1m) and a resolved one
// (depth_nonzero on billing, fired at t0, resolved at t0+1m).
func sampleAlerts(t *testing.T) (firing, resolved Alert) {
	t.Helper()
	zero := time.Duration(0)
	rs := RuleSet{
		Rules:     rules("pending_count", "depth_nonzero"),
		Overrides: Overrides{"billing": {"depth_nonzero": {For: &zero}}},
	}
	st, _ := Evaluate(State{}, pending(t0, map[string]int64{"billing": 1}), rs)
	_, notes := Evaluate(st, pending(t0.Add(time.Minute), map[string]int64{"orders": 150}), rs)
	require.Len(t, notes, 2)
	require.Equal(t, StatusResolved, notes[0].Status)
	require.Equal(t, StatusFiring, notes[1].Status)
	return notes[1], notes[0]
}
