package console_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// requireSecurityHeaders: every console answer forbids framing, inline
// script, sniffing and referrers.
func requireSecurityHeaders(t *testing.T, r response) {
	t.Helper()
	csp := r.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"} {
		require.Contains(t, csp, want, "%s %s", r.Request.Method, r.Request.URL.Path)
	}
	require.NotContains(t, csp, "unsafe-inline")
	require.NotContains(t, csp, "unsafe-eval")
	require.Equal(t, "DENY", r.Header.Get("X-Frame-Options"))
	require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"))
	require.Equal(t, "same-origin", r.Header.Get("Referrer-Policy"))
	require.NotEmpty(t, r.Header.Get("X-Request-Id"), "the API's request id covers the console")
}

func sessionCookie(t *testing.T, r response) *http.Cookie {
	t.Helper()
	for _, c := range r.Cookies() {
		if c.Name == "dlq_session" {
			return c
		}
	}
	t.Fatalf("no dlq_session cookie in %v", r.Header["Set-Cookie"])
	return nil
}

// TestSignIn: the form until signed in; a wrong token is refused; the
// right one sets a strict, HttpOnly session cookie whose id the database
// keeps only as a hash, and leads to the overview.
func TestSignIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client()
	r := c.get(t, "/ui/")
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Contains(t, r.text, `name="token"`)
	require.NotContains(t, r.text, `data-test="sign-out"`)
	requireSecurityHeaders(t, r)

	r = c.post(t, "/ui/sign-in", url.Values{"token": {tokWrong}})
	require.Equal(t, http.StatusUnauthorized, r.StatusCode)
	require.Contains(t, r.text, `data-test="flash"`)
	require.Empty(t, r.Cookies())
	requireSecurityHeaders(t, r)

	r = c.post(t, "/ui/sign-in", url.Values{"token": {tokOp}, "next": {"/ui/groups"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode)
	require.Equal(t, "/ui/groups", r.Header.Get("Location"))
	ck := sessionCookie(t, r)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.Equal(t, "/ui/", ck.Path)
	require.False(t, ck.Secure, "plain HTTP: a Secure cookie would never come back")
	require.Greater(t, ck.MaxAge, 0, "the session expires")

	var name string
	id, mac, ok := strings.Cut(ck.Value, ".")
	require.True(t, ok, "the cookie holds the id and its MAC")
	require.NotEmpty(t, mac)
	hash := sha256.Sum256([]byte(id))
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT token_name FROM console_sessions WHERE id_hash = $1`, hash[:]).Scan(&name))
	require.Equal(t, "ops", name)
	var raw int
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions WHERE id_hash = $1`, []byte(id)).Scan(&raw))
	require.Zero(t, raw, "the id itself is not stored")

	r = c.get(t, "/ui/")
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Contains(t, r.text, `data-test="sign-out"`)
	require.NotContains(t, r.text, `name="token"`)

	// Off-site return addresses are not followed.
	r = b.client().post(t, "/ui/sign-in", url.Values{"token": {tokOp}, "next": {"//evil.example/"}})
	require.Equal(t, "/ui/", r.Header.Get("Location"))
}

// TestRotatedTokenEndsItsSessions: a token given a new secret under the
// same name (DLQ_ADMIN_TOKEN rotated, say) ends the console sessions
// signed in with the old one, on every instance; they lived on until they
// expired, 12 hours later, for whoever held the cookie.
func TestRotatedTokenEndsItsSessions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ck := sessionCookie(t, b.client().post(t, "/ui/sign-in", url.Values{"token": {tokOp}}))
	with := func(srv *bundle) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.srv.URL+"/ui/", nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
		return srv.client().do(t, req)
	}
	same := setup(t, func(o *setupOpts) { o.store, o.dsn = b.st, b.dsn })
	r := with(same)
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Contains(t, r.text, `data-test="sign-out"`, "another instance, the same secret: signed in")

	rotated := setup(t, func(o *setupOpts) {
		o.store, o.dsn = b.st, b.dsn
		o.tokens = []auth.Token{{Name: "ops", Token: "rotated-operator-secret-0123456789", Role: auth.RoleOperator}}
	})
	r = with(rotated)
	require.NotContains(t, r.text, `data-test="sign-out"`, "the old secret's session ended")
	require.Contains(t, r.text, `name="token"`)
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions WHERE token_name = 'ops'`).Scan(&n))
	require.Zero(t, n, "and is deleted")

	// The id alone (without its MAC) signs nobody in.
	ck2 := sessionCookie(t, b.client().post(t, "/ui/sign-in", url.Values{"token": {tokViewer}}))
	id, _, _ := strings.Cut(ck2.Value, ".")
	req, err := http.NewRequest(http.MethodGet, same.srv.URL+"/ui/", nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: ck2.Name, Value: id})
	require.NotContains(t, same.client().do(t, req).text, `data-test="sign-out"`)
}

// TestSecureCookieUnderTLS: over TLS the session cookie is Secure.
func TestSecureCookieUnderTLS(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.tls = true })
	r := b.client().post(t, "/ui/sign-in", url.Values{"token": {tokAdmin}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode)
	require.True(t, sessionCookie(t, r).Secure)
}

// TestSignInThrottle: wrong tokens from one address are throttled as the
// API throttles them: past the burst even the right token gets 429.
func TestSignInThrottle(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.failureRate, o.failureBurst = 0.001, 2 })
	c := b.client()
	for range 2 {
		require.Equal(t, http.StatusUnauthorized, c.post(t, "/ui/sign-in", url.Values{"token": {tokWrong}}).StatusCode)
	}
	r := c.post(t, "/ui/sign-in", url.Values{"token": {tokAdmin}})
	require.Equal(t, http.StatusTooManyRequests, r.StatusCode)
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Contains(t, r.text, `data-test="flash"`)
	require.Empty(t, r.Cookies())
}

// TestRoutes: every page without a session sends the browser to sign in;
// every action without one is refused; signed in, each page answers 200,
// unknown things 404, wrong methods 405, with the security headers on
// every answer.
func TestRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(3, "orders")...)
	id := strconv.FormatInt(ids[0], 10)
	task, err := b.ops.StartReplay(context.Background(), ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole},
		ops.ReplayRequest{Request: replay.Request{IDs: ids[:1], DelaySeconds: 600, Canary: &replay.Canary{Count: 1, WaitSeconds: 5}}})
	require.NoError(t, err)
	pages := []string{"/ui/replays/" + strconv.FormatInt(task.ID, 10), "/ui/messages", "/ui/messages?status=all&source_queue=orders", "/ui/messages/" + id,
		"/ui/messages/" + id + "/body", "/ui/groups", "/ui/replays", "/ui/jobs", "/ui/audit"}
	actions := []string{"/ui/confirm", "/ui/act", "/ui/replays/1/cancel", "/ui/sign-out"}

	anon := b.client()
	for _, p := range pages {
		r := anon.get(t, p)
		require.Equal(t, http.StatusSeeOther, r.StatusCode, p)
		require.Equal(t, "/ui/?next="+url.QueryEscape(p), r.Header.Get("Location"), p)
		requireSecurityHeaders(t, r)
	}
	for _, p := range actions {
		r := anon.post(t, p, url.Values{"csrf": {"x"}, "action": {"acknowledge"}, "id": {id}})
		require.Equal(t, http.StatusForbidden, r.StatusCode, p)
		requireSecurityHeaders(t, r)
	}

	admin := b.signIn(t, tokAdmin)
	for _, p := range pages {
		r := admin.get(t, p)
		require.Equal(t, http.StatusOK, r.StatusCode, "%s: %s", p, r.text)
		requireSecurityHeaders(t, r)
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/ui/nothing-here", http.StatusNotFound},
		{"GET", "/ui/messages/999999999", http.StatusNotFound},
		{"GET", "/ui/messages/abc", http.StatusNotFound},
		{"GET", "/ui/replays/999999", http.StatusNotFound},
		{"GET", "/ui/static/", http.StatusNotFound},
		{"GET", "/ui/static/nothing.js", http.StatusNotFound},
		{"DELETE", "/ui/messages", http.StatusMethodNotAllowed},
		{"GET", "/ui/act", http.StatusMethodNotAllowed},
	} {
		req, err := http.NewRequest(c.method, b.srv.URL+c.path, nil)
		require.NoError(t, err)
		r := admin.do(t, req)
		require.Equal(t, c.status, r.StatusCode, "%s %s", c.method, c.path)
		requireSecurityHeaders(t, r)
		// A mistyped address keeps the signed-in user's navigation,
		// not a sign-in link as if they had been signed out.
		require.Contains(t, r.text, `data-test="sign-out"`, "%s %s", c.method, c.path)
	}
	for path, ctype := range map[string]string{"/ui/static/app.css": "text/css", "/ui/static/app.js": "javascript",
		"/ui/static/vendor/htmx.min.js": "javascript"} {
		r := anon.get(t, path)
		require.Equal(t, http.StatusOK, r.StatusCode, path)
		require.Contains(t, r.Header.Get("Content-Type"), ctype, path)
		requireSecurityHeaders(t, r)
	}

	// A polled replay row answers the row alone.
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/ui/replays/"+strconv.FormatInt(task.ID, 10), nil)
	require.NoError(t, err)
	req.Header.Set("HX-Request", "true")
	r := admin.do(t, req)
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.True(t, strings.HasPrefix(strings.TrimSpace(r.text), `<tr data-test="replay-row"`), r.text)
	require.Contains(t, r.text, `hx-trigger="every 2s"`, "a task not finished keeps polling")
	require.Contains(t, r.text, `<span data-test="republished">0</span>`, "what the task sent again after an unknown outcome")
	req.Header.Del("Cookie")
	r = anon.do(t, req)
	require.Equal(t, http.StatusUnauthorized, r.StatusCode, "a poll without a session is told so, not redirected")

	r = admin.get(t, "/ui/messages/"+id+"/body")
	require.Equal(t, "application/octet-stream", r.Header.Get("Content-Type"))
	require.Contains(t, r.Header.Get("Content-Disposition"), "attachment")
	r = b.signIn(t, tokViewer).get(t, "/ui/messages/"+id+"/body")
	require.Equal(t, http.StatusForbidden, r.StatusCode, "a token without bodies gets none")
	r = b.signIn(t, tokViewer).get(t, "/ui/audit")
	require.Equal(t, http.StatusForbidden, r.StatusCode, "audit is not for viewers")

	r = anon.get(t, "/ui")
	require.Equal(t, "/ui/", r.Header.Get("Location"), "/ui leads to the console")
}

// TestCSRF: a state-changing request without the session's CSRF token, with
// a wrong one, or from another origin is refused and changes nothing.
func TestCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(2, "orders")...)
	c := b.signIn(t, tokAdmin)
	form := url.Values{"action": {"acknowledge"}, "id": {strconv.FormatInt(ids[0], 10)}}

	r := c.post(t, "/ui/act", form)
	require.Equal(t, http.StatusForbidden, r.StatusCode, "no token")
	require.Contains(t, r.text, `data-test="flash"`)
	form.Set("csrf", c.csrf[:len(c.csrf)-2]+"xx")
	r = c.post(t, "/ui/act", form)
	require.Equal(t, http.StatusForbidden, r.StatusCode, "a wrong token")
	other := b.signIn(t, tokAdmin)
	form.Set("csrf", other.csrf)
	require.Equal(t, http.StatusForbidden, c.post(t, "/ui/act", form).StatusCode, "another session's token")

	form.Set("csrf", c.csrf)
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/ui/act", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, c.do(t, req).StatusCode, "another origin")
	require.Equal(t, store.StatusPending, b.statuses(t, ids)[ids[0]], "nothing changed")

	r = c.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "id": {strconv.FormatInt(ids[0], 10)}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	actReqID := r.Header.Get("X-Request-Id")
	r = c.follow(t, r)
	require.Contains(t, r.text, "Acknowledged 1 message")
	require.Equal(t, store.StatusAcknowledged, b.statuses(t, ids)[ids[0]])
	require.Equal(t, store.StatusPending, b.statuses(t, ids)[ids[1]])

	// One audit row, naming the console as the door and the request id.
	var actor, via, reqID string
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT actor, via, request_id FROM audit_log WHERE action = 'acknowledge'`).Scan(&actor, &via, &reqID))
	require.Equal(t, "admin", actor)
	require.Equal(t, "console", via)
	require.Equal(t, actReqID, reqID)
}

// TestSignOut: signing out deletes the session everywhere: the old cookie
// no longer signs in.
func TestSignOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signIn(t, tokOp)
	u, _ := url.Parse(b.srv.URL + "/ui/")
	old := c.http.Jar.Cookies(u)
	r := c.act(t, "/ui/sign-out", nil)
	require.Equal(t, http.StatusSeeOther, r.StatusCode)
	require.Equal(t, "/ui/", r.Header.Get("Location"))
	require.Less(t, sessionCookie(t, r).MaxAge, 0, "the browser drops the cookie")

	replay := b.client()
	replay.http.Jar.SetCookies(u, old)
	r = replay.get(t, "/ui/messages")
	require.Equal(t, http.StatusSeeOther, r.StatusCode, "the old cookie signs nobody in")
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions`).Scan(&n))
	require.Zero(t, n)
}

// TestRemovedTokenEndsSession: a session names its token; an instance
// whose configuration no longer has that token treats it as signed out
// and deletes it.
func TestRemovedTokenEndsSession(t *testing.T) {
	t.Parallel()
	a := setup(t)
	c := a.signIn(t, tokOp)
	other := setup(t, func(o *setupOpts) { o.store, o.dsn = a.st, a.dsn; o.tokens = testTokens[1:] }) // no "ops"
	u, _ := url.Parse(a.srv.URL + "/ui/")
	moved := other.client()
	moved.http.Jar.SetCookies(mustURL(t, other.srv.URL+"/ui/"), c.http.Jar.Cookies(u))
	r := moved.get(t, "/ui/messages")
	require.Equal(t, http.StatusSeeOther, r.StatusCode)
	r = c.get(t, "/ui/messages")
	require.Equal(t, http.StatusSeeOther, r.StatusCode, "the session is gone on every instance")
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// TestViewerSeesNoActionsAndIsRefused: a viewer's pages carry no action
// control, and an action it forges (with its own valid CSRF token) is
// refused by the layer and changes nothing.
func TestViewerSeesNoActionsAndIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(2, "orders")...)
	v := b.signIn(t, tokViewer)
	for _, p := range []string{"/ui/messages", "/ui/messages/" + strconv.FormatInt(ids[0], 10), "/ui/groups", "/ui/replays"} {
		r := v.get(t, p)
		require.Equal(t, http.StatusOK, r.StatusCode)
		for _, ctl := range []string{"bulk-replay", "bulk-ack", "bulk-delete", "select-all-matching", `data-test="select"`, "action-replay", "action-ack", "action-delete", "group-replay", "group-ack", `data-test="cancel"`} {
			require.NotContains(t, r.text, ctl, "%s shows %s to a viewer", p, ctl)
		}
	}
	for _, action := range []string{"acknowledge", "delete", "replay"} {
		r := v.act(t, "/ui/act", url.Values{"action": {action}, "id": {strconv.FormatInt(ids[0], 10)}})
		require.Equal(t, http.StatusForbidden, r.StatusCode, action)
		require.Contains(t, r.text, `data-test="flash"`)
	}
	require.Equal(t, store.StatusPending, b.statuses(t, ids)[ids[0]])
	_ = auth.RoleViewer
}

// TestActionAwaitingApproval: an action above the approval threshold is
// recorded for a second person, not run, and the page says so.
func TestActionAwaitingApproval(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 2 })
	ids := b.seed(t, many(3, "orders")...)
	c := b.signIn(t, tokOp)
	form := url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_source_queue": {"orders"}, "max_id": {strconv.FormatInt(ids[2], 10)}}
	r := c.act(t, "/ui/act", form)
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	r = c.follow(t, r)
	require.Contains(t, r.text, "Waiting for approval by admin")
	require.NotContains(t, r.text, "Done:", "a request that only waits is not done")
	// Its expiry as the pages show times: absolute, with how soon beside
	// it (the default wait of 24 h, just recorded).
	flash := elementWords(r.text, "flash")
	require.Len(t, flash, 1)
	require.Regexp(t, `, until \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC \(in 24 h\)\. Nothing has run yet`, flash[0])
	for _, s := range b.statuses(t, ids) {
		require.Equal(t, store.StatusPending, s)
	}
}

// TestGzip: pages and assets go gzipped to a client that accepts it, and a
// page with everything it loads weighs well under 150 KB on the wire.
func TestGzip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(60, "orders")...)
	c := b.signIn(t, tokAdmin)
	total := 0
	for _, p := range []string{"/ui/messages", "/ui/static/app.css", "/ui/static/app.js", "/ui/static/vendor/htmx.min.js"} {
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+p, nil)
		require.NoError(t, err)
		req.Header.Set("Accept-Encoding", "gzip") // set by hand: the client then leaves the body compressed
		r := c.do(t, req)
		require.Equal(t, http.StatusOK, r.StatusCode, p)
		require.Equal(t, "gzip", r.Header.Get("Content-Encoding"), p)
		require.Contains(t, r.Header.Get("Vary"), "Accept-Encoding")
		requireSecurityHeaders(t, r)
		total += len(r.text)
	}
	require.Less(t, total, 60<<10, "50 messages with htmx and the stylesheet, compressed")

	r := c.get(t, "/ui/messages")
	require.Empty(t, r.Header.Get("Content-Encoding"), "Go's client decompresses what it asked for; the page reads as HTML")
	require.Contains(t, r.text, `data-test="message-row"`)
}

// TestRunningReplayStaysInSight: a replay still running (here scheduled)
// is on the overview and on the replays page however many tasks came
// after it; once fifty newer ones had finished, the overview said
// "Replays running: None." and the replays page (the newest hundred) had
// no row to cancel it from.
func TestRunningReplayStaysInSight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var old int64
	require.NoError(t, b.db.QueryRow(ctx, `
INSERT INTO replay_tasks (status, request, requested, start_at) VALUES ('scheduled', '{}', 7, now() + interval '1 day') RETURNING id`).Scan(&old))
	_, err := b.db.Exec(ctx, `
INSERT INTO replay_tasks (status, request, finished_at) SELECT 'completed', '{}', now() FROM generate_series(1, 120)`)
	require.NoError(t, err)
	c := b.signIn(t, tokOp)
	link := fmt.Sprintf(`href="/ui/replays/%d"`, old)
	r := c.get(t, "/ui/")
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Contains(t, r.text, link, "the overview's replays running")
	// Not running yet: the overview says so, and when it starts.
	require.Contains(t, words(r.text), "Replays running or scheduled")
	starts := elementWords(r.text, "replay-starts")
	require.Len(t, starts, 1)
	require.Regexp(t, `^to start \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC \(in 24 h\)$`, starts[0])
	r = c.get(t, "/ui/replays")
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Contains(t, r.text, fmt.Sprintf(`data-test="replay-row" data-id="%d"`, old))
	require.Contains(t, r.text, `data-test="cancel"`)
	require.Equal(t, 101, strings.Count(r.text, `data-test="replay-row"`), "it, then the newest hundred finished")
}
