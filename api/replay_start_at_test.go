package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A replay takes start_at beside delay_seconds: the task is scheduled for
// that time, listed, and cancellable; start_at with delay_seconds, in the
// past or not a time is a 400 naming it.
func TestReplayStartAt(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.realReplayer = true })
	ids := b.seed(t, many("orders", 2)...)
	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	r := b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"ids": ids, "start_at": at.Format(time.RFC3339)})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	var task struct {
		ID      int64     `json:"id"`
		Status  string    `json:"status"`
		StartAt time.Time `json:"start_at"`
		Request struct {
			StartAt *time.Time `json:"start_at"`
		} `json:"request"`
	}
	r.json(t, &task)
	require.Equal(t, "scheduled", task.Status)
	require.True(t, at.Equal(task.StartAt), "starts %s", task.StartAt)
	require.NotNil(t, task.Request.StartAt)

	r = b.do(t, "GET", "/api/v1/replays", tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, string(r.body), fmt.Sprintf(`"id":%d,"status":"scheduled"`, task.ID))

	r = b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"ids": ids, "start_at": at.Format(time.RFC3339), "dry_run": true})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var dry struct {
		StartAt time.Time `json:"start_at"`
	}
	r.json(t, &dry)
	require.True(t, at.Equal(dry.StartAt), "a dry run says when it would start: %s", dry.StartAt)

	for _, body := range []map[string]any{
		{"ids": ids, "start_at": at.Format(time.RFC3339), "delay_seconds": 60},
		{"ids": ids, "start_at": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)},
		{"ids": ids, "start_at": time.Now().Add(31 * 24 * time.Hour).UTC().Format(time.RFC3339)},
		{"ids": ids, "start_at": "after the deploy"},
	} {
		r = b.do(t, "POST", "/api/v1/replays", tokOp, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%v: %s", body, r.body)
		require.Regexp(t, `start_at|RFC 3339`, r.errMessage(t))
	}

	r = b.do(t, "POST", fmt.Sprintf("/api/v1/replays/%d/cancel", task.ID), tokOp, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"status":"cancelled"`)
}
