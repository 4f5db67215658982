package api_test

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// newCron is the real cron service over st with every job off: it serves
// the jobs, alerts and policies views from PostgreSQL and runs nothing. It
// has two policies: orders-retry (queue orders) and everywhere (every
// queue).
func newCron(t *testing.T, st *store.Store) *cron.Service {
	t.Helper()
	policy := func(name string, queues ...string) cron.Policy {
		return cron.Policy{Name: name, Queues: queues, Categories: []string{"transient"}, FirstDelay: time.Minute,
			BackoffFactor: 5, MaxDelay: time.Hour, MaxAttempts: 3}
	}
	c, err := cron.New(cron.Config{
		Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(),
		Instance: "api-test", Schedules: cron.Only(cron.Schedules{}),
		Policies: cron.PoliciesConfig{Policies: []cron.Policy{policy("orders-retry", "orders"), policy("everywhere")}},
	})
	require.NoError(t, err)
	return c
}

// TestAuthMatrix calls every route of the route table (api.Routes) with
// no token, a wrong token, and each role, and requires exactly the
// expected status. The table drives it: a route without rows here fails
// the test, as does a row no route serves. Every route must also refuse an
// unknown query parameter and an unknown body field, naming them.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	b := setup(t, func(o *setupOpts) { o.store, o.dsn = st, dsn; o.realReplayer = true; o.cron = newCron(t, st) })
	rep := newReplayer(t, st)
	orders := b.seed(t, many("orders", 3)...)
	billing := b.seed(t, many("billing", 2)...)
	// One message per caller allowed to delete, so every DELETE finds one.
	deletable := b.seed(t, many("orders", 1)...)
	scopedTask, err := rep.Start(t.Context(), replay.Request{IDs: []int64{orders[0]}, Scope: []string{scopedQueue}},
		store.Actor{Name: "orders-ops", Via: "api"})
	require.NoError(t, err)
	billingTask, err := rep.Start(t.Context(), replay.Request{Filter: &store.Filter{SourceQueue: "billing"}},
		store.Actor{Name: "admin", Via: "api"})
	require.NoError(t, err)
	// Two requests waiting for approval, to acknowledge orders messages:
	// one by the operator, one by the admin (approval is off in this
	// server, so they are made here).
	approval := func(by store.Actor) store.Approval {
		a, err := b.st.CreateApproval(t.Context(), store.NewApproval{Action: store.ActionAcknowledge, Request: []byte(`{}`),
			Selection: store.Filter{SourceQueue: "orders"}, TTL: time.Hour, Actor: by})
		require.NoError(t, err)
		return a
	}
	byOperator := approval(store.Actor{Name: "ops", Role: auth.RoleOperator, Via: "api"})
	byAdmin := approval(store.Actor{Name: "admin", Role: auth.RoleAdmin, Via: "api"})
	toWithdraw := approval(store.Actor{Name: "ops", Role: auth.RoleOperator, Via: "api"})
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

	// row is one request; want lists the status for none, wrong, viewer,
	// operator, scoped operator, admin, in that order.
	type row struct {
		path string
		body map[string]any
		want [6]int
	}
	const (
		ok  = http.StatusOK
		acc = http.StatusAccepted
		u   = http.StatusUnauthorized
		f   = http.StatusForbidden
		nf  = http.StatusNotFound
	)
	public := [6]int{ok, ok, ok, ok, ok, ok}
	read := [6]int{u, u, ok, ok, ok, ok}
	// matrix holds, per route pattern, the requests that exercise it.
	matrix := map[string][]row{
		"GET /api/v1/messages": {
			{"/api/v1/messages", nil, read},
			{"/api/v1/messages?source_queue=billing", nil, [6]int{u, u, ok, ok, f, ok}},
			{"/api/v1/messages?include_body=true", nil, [6]int{u, u, f, ok, ok, ok}},
		},
		"GET /api/v1/messages/export": {
			{"/api/v1/messages/export?source_queue=orders", nil, [6]int{u, u, f, ok, ok, ok}},
			{"/api/v1/messages/export?source_queue=billing", nil, [6]int{u, u, f, ok, f, ok}},
		},
		"POST /api/v1/messages/import": {
			// An export's end line alone: nothing to store.
			{"/api/v1/messages/import", map[string]any{"export": map[string]any{"count": 0, "last_id": nil, "complete": true}}, [6]int{u, u, f, f, f, ok}},
		},
		"GET /api/v1/messages/{id}": {
			{fmt.Sprintf("/api/v1/messages/%d", orders[0]), nil, read},
			{fmt.Sprintf("/api/v1/messages/%d", billing[0]), nil, [6]int{u, u, ok, ok, nf, ok}},
		},
		"DELETE /api/v1/messages/{id}": {
			{fmt.Sprintf("/api/v1/messages/%d", billing[1]), nil, [6]int{u, u, f, f, f, ok}},
			{fmt.Sprintf("/api/v1/messages/%d", deletable[0]), nil, [6]int{u, u, f, f, f, ok}},
		},
		"POST /api/v1/messages/{id}/edit-replay": {
			{fmt.Sprintf("/api/v1/messages/%d/edit-replay", orders[0]), map[string]any{"set_headers": map[string]any{"x-note": "fixed"}, "dry_run": true}, [6]int{u, u, f, ok, ok, ok}},
			{fmt.Sprintf("/api/v1/messages/%d/edit-replay", billing[0]), map[string]any{"set_headers": map[string]any{"x-note": "fixed"}, "dry_run": true}, [6]int{u, u, f, ok, nf, ok}},
		},
		"POST /api/v1/messages/acknowledge": {
			{"/api/v1/messages/acknowledge", map[string]any{"ids": []int64{orders[1]}}, [6]int{u, u, f, ok, ok, ok}},
			{"/api/v1/messages/acknowledge", map[string]any{"filter": map[string]any{"source_queue": "billing"}, "dry_run": true}, [6]int{u, u, f, ok, f, ok}},
		},
		"POST /api/v1/messages/delete": {
			{"/api/v1/messages/delete", map[string]any{"filter": map[string]any{"source_queue": "orders"}, "dry_run": true}, [6]int{u, u, f, f, f, ok}},
		},
		"POST /api/v1/replays": {
			{"/api/v1/replays", map[string]any{"ids": []int64{orders[2]}}, [6]int{u, u, f, acc, acc, acc}},
			{"/api/v1/replays", map[string]any{"ids": []int64{billing[0]}}, [6]int{u, u, f, acc, nf, acc}},
			{"/api/v1/replays", map[string]any{"filter": map[string]any{"source_queue": "billing"}, "dry_run": true}, [6]int{u, u, f, ok, f, ok}},
			{"/api/v1/replays", map[string]any{"filter": map[string]any{"source_queue": "orders"}, "dry_run": true}, [6]int{u, u, f, ok, ok, ok}},
		},
		"GET /api/v1/replays": {{"/api/v1/replays", nil, read}},
		"GET /api/v1/replays/{id}": {
			{fmt.Sprintf("/api/v1/replays/%d", scopedTask.ID), nil, read},
			{fmt.Sprintf("/api/v1/replays/%d", billingTask.ID), nil, [6]int{u, u, ok, ok, nf, ok}},
		},
		"POST /api/v1/replays/{id}/cancel": {
			// Cancelling a cancelled task is a no-op that answers the task.
			{fmt.Sprintf("/api/v1/replays/%d/cancel", scopedTask.ID), nil, [6]int{u, u, f, ok, ok, ok}},
			{fmt.Sprintf("/api/v1/replays/%d/cancel", billingTask.ID), nil, [6]int{u, u, f, ok, nf, ok}},
		},
		"GET /api/v1/approvals": {{"/api/v1/approvals", nil, read}},
		"GET /api/v1/approvals/{id}": {
			{fmt.Sprintf("/api/v1/approvals/%d", byOperator.ID), nil, [6]int{u, u, ok, ok, nf, ok}},
		},
		// Never the requester; the scoped operator cannot see a request
		// made without scope.
		"POST /api/v1/approvals/{id}/approve": {
			{fmt.Sprintf("/api/v1/approvals/%d/approve", byOperator.ID), nil, [6]int{u, u, f, f, nf, ok}},
		},
		"POST /api/v1/approvals/{id}/reject": {
			{fmt.Sprintf("/api/v1/approvals/%d/reject", byAdmin.ID), nil, [6]int{u, u, f, ok, nf, f}},
		},
		// Its requester only; a token that cannot see it gets 404.
		"POST /api/v1/approvals/{id}/withdraw": {
			{fmt.Sprintf("/api/v1/approvals/%d/withdraw", toWithdraw.ID), nil, [6]int{u, u, f, ok, nf, f}},
		},
		"GET /api/v1/policies": {{"/api/v1/policies", nil, read}},
		"GET /api/v1/policies/{name}": {
			{"/api/v1/policies/orders-retry", nil, read},
			{"/api/v1/policies/everywhere", nil, [6]int{u, u, ok, ok, nf, ok}},
		},
		"POST /api/v1/policies/{name}/pause": {
			{"/api/v1/policies/orders-retry/pause", nil, [6]int{u, u, f, ok, ok, ok}},
			{"/api/v1/policies/everywhere/pause", nil, [6]int{u, u, f, ok, nf, ok}},
		},
		"POST /api/v1/policies/{name}/resume": {
			{"/api/v1/policies/orders-retry/resume", nil, [6]int{u, u, f, ok, ok, ok}},
			{"/api/v1/policies/everywhere/resume", nil, [6]int{u, u, f, ok, nf, ok}},
		},
		"GET /api/v1/groups": {
			{"/api/v1/groups", nil, read},
			{"/api/v1/groups?source_queue=billing", nil, [6]int{u, u, ok, ok, f, ok}},
		},
		"GET /api/v1/groups/{id}": {
			{"/api/v1/groups/" + groups[0].ID, nil, read},
			{"/api/v1/groups/" + billingGroups[0].ID, nil, [6]int{u, u, ok, ok, nf, ok}},
		},
		"GET /api/v1/stats":        {{"/api/v1/stats", nil, read}},
		"GET /api/v1/status":       {{"/api/v1/status", nil, read}},
		"GET /api/v1/audit":        {{"/api/v1/audit", nil, [6]int{u, u, f, ok, ok, ok}}},
		"GET /api/v1/jobs":         {{"/api/v1/jobs", nil, read}},
		"GET /api/v1/alerts":       {{"/api/v1/alerts", nil, read}},
		"GET /api/v1/openapi.yaml": {{"/api/v1/openapi.yaml", nil, public}},
		"GET /healthz":             {{"/healthz", nil, public}},
		"GET /readyz":              {{"/readyz", nil, public}},
		"GET /metrics":             {{"/metrics", nil, public}},
	}

	// The matrix and the route table cover each other.
	routes := api.Routes()
	mux := http.NewServeMux()
	byPattern := map[string]api.Route{}
	for _, rt := range routes {
		mux.HandleFunc(rt.Pattern(), func(http.ResponseWriter, *http.Request) {})
		byPattern[rt.Pattern()] = rt
		require.NotEmpty(t, matrix[rt.Pattern()], "route %s has no row in the auth matrix", rt.Pattern())
	}
	for pattern, rows := range matrix {
		require.Contains(t, byPattern, pattern, "the matrix has rows for %s, which is not in the route table", pattern)
		for _, r := range rows {
			method, _, _ := strings.Cut(pattern, " ")
			req, err := http.NewRequest(method, "http://x"+r.path, nil)
			require.NoError(t, err)
			_, got := mux.Handler(req)
			require.Equal(t, pattern, got, "%s %s is served by another route", method, r.path)
		}
	}

	// Each route with each caller: exactly the expected status. Public
	// routes ignore tokens; a role that is too low is 403 before anything
	// about the request is looked at.
	for _, rt := range routes {
		for _, r := range matrix[rt.Pattern()] {
			for i, tok := range callers {
				var body any
				if r.body != nil {
					body = r.body
				}
				got := b.do(t, rt.Method, r.path, tok, body)
				require.Equal(t, r.want[i], got.status, "%s %s as %s: %s", rt.Method, r.path, name[tok], got.body)
				if got.status >= 400 {
					code := got.errCode(t)
					if got.status == u {
						require.Contains(t, []string{"missing_token", "invalid_token"}, code)
						require.Equal(t, tok == none, code == "missing_token")
						require.Equal(t, `Bearer realm="dlq"`, got.header.Get("WWW-Authenticate"))
					}
				}
			}
		}
	}

	// Every route refuses an unknown query parameter and an unknown body
	// field, by name, before doing anything.
	audits := b.count(t, `SELECT count(*) FROM audit_log`)
	for _, rt := range routes {
		r := matrix[rt.Pattern()][0]
		tok := admin
		if rt.Role == "" {
			tok = none
		}
		sep := "?"
		if strings.Contains(r.path, "?") {
			sep = "&"
		}
		got := b.do(t, rt.Method, r.path+sep+"staus=pending", tok, r.body)
		require.Equal(t, http.StatusBadRequest, got.status, "%s %s?staus=: %s", rt.Method, r.path, got.body)
		require.Equal(t, "invalid_parameter", got.errCode(t))
		require.Contains(t, got.errMessage(t), "staus", "%s names the parameter", rt.Pattern())

		body := map[string]any{"colour": "blue"}
		for k, v := range r.body {
			body[k] = v
		}
		got = b.do(t, rt.Method, r.path, tok, body)
		require.Equal(t, http.StatusBadRequest, got.status, "%s %s with an unknown field: %s", rt.Method, r.path, got.body)
		require.Contains(t, got.errMessage(t), "colour", "%s names the field", rt.Pattern())
		if !rt.Body {
			got = b.do(t, rt.Method, r.path, tok, "[1,2]")
			require.Equal(t, http.StatusBadRequest, got.status, "%s takes no body", rt.Pattern())
			require.Contains(t, got.errMessage(t), "takes no body")
		}
	}
	require.Equal(t, audits, b.count(t, `SELECT count(*) FROM audit_log`), "refused requests change nothing")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM dead_messages WHERE id = $1`, orders[0]))
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
		_, err := api.New(api.Config{Addr: addr, Ops: newOps(t, st, nil, nil, 0), Auth: open})
		require.Error(t, err, addr)
		require.Contains(t, err.Error(), "no API token is configured", addr)
	}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:0", "[::1]:8080"} {
		_, err := api.New(api.Config{Addr: addr, Ops: newOps(t, st, nil, nil, 0), Auth: open})
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

// TestWrongTokenThrottle: wrong tokens from one client address are
// answered 401 until its burst is spent, then 429 with Retry-After for
// everything it sends, the right token included, so tokens cannot be
// guessed at request speed. Another address is not affected.
func TestWrongTokenThrottle(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.failureRate = 0.001; o.failureBurst = 3 })
	for i := range 2 {
		r := b.do(t, "GET", "/api/v1/status", fmt.Sprintf("guess-%d", i), nil)
		require.Equal(t, http.StatusUnauthorized, r.status, "guess %d", i)
	}
	// A missing token guesses nothing and spends nothing, and the right
	// token works while the burst lasts.
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, b.do(t, "GET", "/api/v1/status", "", nil).status)
	}
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/api/v1/status", tokViewer, nil).status)
	require.Equal(t, http.StatusUnauthorized, b.do(t, "GET", "/api/v1/status", "guess-2", nil).status)
	for _, tok := range []string{"guess-4", tokAdmin, "", tokViewer} {
		r := b.do(t, "GET", "/api/v1/status", tok, nil)
		require.Equal(t, http.StatusTooManyRequests, r.status, "%q: %s", tok, r.body)
		require.Equal(t, "rate_limited", r.errCode(t))
		require.Contains(t, r.errMessage(t), "failed authentications from 127.0.0.1")
		wait, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err)
		require.InDelta(t, 1000, wait, 5, "one token at 0.001/s")
	}
	// Public routes stay open.
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/healthz", tokWrong, nil).status)

	// The same server from another loopback address.
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)},
	}).DialContext}}
	req, err := http.NewRequest("GET", b.srv.URL+"/api/v1/status", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokViewer)
	resp, err := other.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestNoTokenServesOnlyLocalNonBrowserOrSameOrigin: with no token every
// local caller is an admin, so a web page in the developer's browser must
// not be one: a cross-site request (a form a page submits to 127.0.0.1) and
// a request naming another host (DNS rebinding) are refused; the CLI,
// curl and the API's own origin are served.
func TestNoTokenServesOnlyLocalNonBrowserOrSameOrigin(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	open, err := auth.New(auth.Config{})
	require.NoError(t, err)
	s, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: newOps(t, st, nil, nil, 0), Auth: open, Gatherer: prometheus.NewRegistry()})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	send := func(method, path, host string, header map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, _ := send("GET", "/api/v1/status", "", nil)
	require.Equal(t, http.StatusOK, code, "curl, the CLI")
	code, _ = send("GET", "/api/v1/status", "localhost:8080", nil)
	require.Equal(t, http.StatusOK, code)
	code, body := send("GET", "/api/v1/messages?include_body=true", "evil.example:8080", nil)
	require.Equal(t, http.StatusForbidden, code, "DNS rebinding: %s", body)
	require.Contains(t, body, "is not a loopback name")
	code, _ = send("GET", "/ui/", "evil.example:8080", nil)
	require.Equal(t, http.StatusForbidden, code, "the console too")
	code, body = send("POST", "/api/v1/replays/1/cancel", "", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, code, "a cross-site form: %s", body)
	require.Contains(t, body, "cross-site")
	code, _ = send("POST", "/api/v1/replays/1/cancel", "", map[string]string{"Origin": "http://127.0.0.1:3000"})
	require.Equal(t, http.StatusForbidden, code, "another local origin, by Origin alone")
	code, _ = send("GET", "/api/v1/status", "", map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusOK, code, "the API's own origin")
}
