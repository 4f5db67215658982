package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// TestAuthMatrix calls every route with no token, a wrong token, and each
// role, and requires exactly the documented status.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	rep := &recordingReplayer{}
	b := setup(t, func(o *setupOpts) { o.replayer = rep })
	orders := b.seed(t, many("orders", 3)...)
	billing := b.seed(t, many("billing", 2)...)
	// One message per caller allowed to delete, so every DELETE finds one.
	deletable := b.seed(t, many("orders", 1)...)
	_, err := rep.Start(t.Context(), replay.Request{IDs: []int64{orders[0]}}, store.Actor{Name: "orders-ops"})
	require.NoError(t, err)
	groups, err := b.st.Groups(t.Context(), store.GroupQuery{SourceQueue: "orders"})
	require.NoError(t, err)
	require.NotEmpty(t, groups)
	billingGroups, err := b.st.Groups(t.Context(), store.GroupQuery{SourceQueue: "billing"})
	require.NoError(t, err)
	require.NotEmpty(t, billingGroups)

	const (
		none   = ""
		wrong  = tokWrong
		viewer = tokViewer
		op     = tokOp
		scoped = tokScoped
		admin  = tokAdmin
	)
	callers := []string{none, wrong, viewer, op, scoped, admin}
	name := map[string]string{none: "no token", wrong: "wrong token", viewer: "viewer", op: "operator", scoped: "scoped operator", admin: "admin"}

	type row struct {
		method, path string
		body         any
		// want lists the status for none, wrong, viewer, operator, scoped, admin.
		want [6]int
	}
	const (
		ok  = http.StatusOK
		acc = http.StatusAccepted
		u   = http.StatusUnauthorized
		f   = http.StatusForbidden
		nf  = http.StatusNotFound
	)
	ackOrders := map[string]any{"ids": []int64{orders[1]}}
	rows := []row{
		{"GET", "/api/v1/messages", nil, [6]int{u, u, ok, ok, ok, ok}},
		{"GET", "/api/v1/messages?source_queue=billing", nil, [6]int{u, u, ok, ok, f, ok}},
		{"GET", fmt.Sprintf("/api/v1/messages/%d", orders[0]), nil, [6]int{u, u, ok, ok, ok, ok}},
		{"GET", fmt.Sprintf("/api/v1/messages/%d", billing[0]), nil, [6]int{u, u, ok, ok, nf, ok}},
		{"DELETE", fmt.Sprintf("/api/v1/messages/%d", deletable[0]), nil, [6]int{u, u, f, f, f, ok}},
		{"POST", "/api/v1/messages/acknowledge", ackOrders, [6]int{u, u, f, ok, ok, ok}},
		{"POST", "/api/v1/messages/acknowledge", map[string]any{"filter": map[string]any{"source_queue": "billing"}, "dry_run": true}, [6]int{u, u, f, ok, f, ok}},
		{"POST", "/api/v1/messages/delete", map[string]any{"filter": map[string]any{"source_queue": "orders"}, "dry_run": true}, [6]int{u, u, f, f, f, ok}},
		{"POST", "/api/v1/replays", map[string]any{"ids": []int64{orders[0]}}, [6]int{u, u, f, acc, acc, acc}},
		{"POST", "/api/v1/replays", map[string]any{"ids": []int64{billing[0]}}, [6]int{u, u, f, acc, nf, acc}},
		{"POST", "/api/v1/replays", map[string]any{"filter": map[string]any{"source_queue": "billing"}, "dry_run": true}, [6]int{u, u, f, ok, f, ok}},
		{"GET", "/api/v1/replays", nil, [6]int{u, u, ok, ok, ok, ok}},
		{"GET", "/api/v1/replays/1", nil, [6]int{u, u, ok, ok, ok, ok}},
		{"POST", "/api/v1/replays/1/cancel", nil, [6]int{u, u, f, ok, http.StatusConflict, http.StatusConflict}},
		{"GET", "/api/v1/groups", nil, [6]int{u, u, ok, ok, ok, ok}},
		{"GET", "/api/v1/groups?source_queue=billing", nil, [6]int{u, u, ok, ok, f, ok}},
		{"GET", "/api/v1/groups/" + groups[0].ID, nil, [6]int{u, u, ok, ok, ok, ok}},
		{"GET", "/api/v1/groups/" + billingGroups[0].ID, nil, [6]int{u, u, ok, ok, nf, ok}},
		{"GET", "/api/v1/stats", nil, [6]int{u, u, ok, ok, ok, ok}},
		{"GET", "/api/v1/status", nil, [6]int{u, u, ok, ok, ok, ok}},
		{"GET", "/api/v1/audit", nil, [6]int{u, u, f, f, f, ok}},
		{"GET", "/api/v1/openapi.yaml", nil, [6]int{ok, ok, ok, ok, ok, ok}},
		{"GET", "/healthz", nil, [6]int{ok, ok, ok, ok, ok, ok}},
	}
	for _, r := range rows {
		for i, tok := range callers {
			got := b.do(t, r.method, r.path, tok, r.body)
			require.Equal(t, r.want[i], got.status, "%s %s as %s: %s", r.method, r.path, name[tok], got.body)
			if got.status >= 400 {
				code := got.errCode(t)
				if got.status == u {
					require.Contains(t, []string{"missing_token", "invalid_token"}, code)
					require.Equal(t, tok == none, code == "missing_token")
				}
			}
		}
	}
	// Every route of the API was exercised: resolve each request to its
	// pattern with a mux holding the documented routes.
	patterns := []string{
		"GET /api/v1/messages", "GET /api/v1/messages/{id}", "DELETE /api/v1/messages/{id}",
		"POST /api/v1/messages/acknowledge", "POST /api/v1/messages/delete",
		"POST /api/v1/replays", "GET /api/v1/replays", "GET /api/v1/replays/{id}", "POST /api/v1/replays/{id}/cancel",
		"GET /api/v1/groups", "GET /api/v1/groups/{id}", "GET /api/v1/stats", "GET /api/v1/status",
		"GET /api/v1/audit", "GET /api/v1/openapi.yaml",
	}
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.HandleFunc(p, func(http.ResponseWriter, *http.Request) {})
	}
	seen := map[string]bool{}
	for _, r := range rows {
		req, err := http.NewRequest(r.method, "http://x"+r.path, nil)
		require.NoError(t, err)
		if _, p := mux.Handler(req); p != "" {
			seen[p] = true
		}
	}
	for _, p := range patterns {
		require.True(t, seen[p], "route %s is missing from the matrix", p)
	}
}

// TestNoTokenLoopbackOnly: with no token configured the API refuses any
// non-loopback address, and on loopback every caller is an admin.
func TestNoTokenLoopbackOnly(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	open, err := auth.New(auth.Config{})
	require.NoError(t, err)
	require.True(t, open.Open())
	for _, addr := range []string{":8080", "0.0.0.0:8080", "10.1.2.3:80", "[::]:80", "example.com:80"} {
		_, err := api.New(api.Config{Addr: addr, Store: st, Auth: open})
		require.Error(t, err, addr)
		require.Contains(t, err.Error(), "no API token is configured", addr)
	}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:0", "[::1]:8080"} {
		_, err := api.New(api.Config{Addr: addr, Store: st, Auth: open})
		require.NoError(t, err, addr)
	}
	p, err := open.Authenticate("")
	require.NoError(t, err)
	require.Equal(t, auth.RoleAdmin, p.Role)
}

func TestRateLimitAndBodyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.rate = 1; o.maxBody = 1024 })
	limited := 0
	for range 6 {
		r := b.do(t, "GET", "/api/v1/status", tokViewer, nil)
		if r.status == http.StatusTooManyRequests {
			require.Equal(t, "rate_limited", r.errCode(t))
			require.NotEmpty(t, r.header.Get("Retry-After"))
			limited++
		}
	}
	require.Greater(t, limited, 0, "a burst of 6 at 1/s must be limited")
	// Another token has its own bucket.
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/api/v1/status", tokOp, nil).status)

	big := `{"ids":[` + strings.Repeat("1,", 1000) + `1]}`
	r := b.do(t, "POST", "/api/v1/messages/acknowledge", tokAdmin, big)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.status, "%s", r.body)
	require.Equal(t, "body_too_large", r.errCode(t))
}
