package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The findings of an on-call walkthrough of the console, each seen from
// the pages as served.

var startTagRe = regexp.MustCompile(`<([a-z0-9]+)\b[^>]*>`)

// elementWords is the words of each element carrying data-test="name",
// its nested elements included.
func elementWords(page, name string) []string {
	var out []string
	for rest := page; ; {
		i := strings.Index(rest, `data-test="`+name+`"`)
		if i < 0 {
			return out
		}
		open := strings.LastIndex(rest[:i], "<")
		m := startTagRe.FindStringSubmatchIndex(rest[open:])
		if m == nil || m[0] != 0 {
			return out
		}
		tag := rest[open+m[2] : open+m[3]]
		body := rest[open+m[1]:]
		depth, end := 1, -1
		for j := 0; j < len(body) && end < 0; j++ {
			switch {
			case strings.HasPrefix(body[j:], "</"+tag+">"):
				if depth--; depth == 0 {
					end = j
				}
			case strings.HasPrefix(body[j:], "<"+tag+">"), strings.HasPrefix(body[j:], "<"+tag+" "):
				depth++
			}
		}
		if end < 0 {
			return out
		}
		out = append(out, words(body[:end]))
		rest = body[end:]
	}
}

// TestSearchSaysWhatItSearched: a phrase 1.1 KiB into a text body is not
// found by a search of every queue (the text index holds a body's first
// 1 KiB), and the page says so in words, beside the search box and where
// the answer would be, with the way to find it: within its queue the
// search reads whole bodies, and finds it.
func TestSearchSaysWhatItSearched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"note":"` + strings.Repeat("padding ", 140) + `quokka ledger"}`
	require.Greater(t, strings.Index(body, "quokka"), store.BodyTextMax)
	b.seed(t, msg{queue: "orders", body: []byte(body)})
	dlqtest.IndexText(t, b.st)
	op := b.signIn(t, tokOp)

	r := op.get(t, "/ui/messages?q="+url.QueryEscape("quokka ledger"))
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Zero(t, strings.Count(r.text, `data-test="message-row"`))
	help := elementWords(r.text, "search-help")
	require.Len(t, help, 1)
	require.Contains(t, help[0], "Searches every queue")
	require.Contains(t, help[0], "the first 1 KiB of each text body")
	require.Contains(t, help[0], "choose a source queue to search whole bodies")
	missed := elementWords(r.text, "search-missed")
	require.Equal(t, help, missed, "a search of every queue that found nothing says what it read")
	require.Contains(t, r.text, `aria-describedby="search-help"`)

	r = op.get(t, "/ui/messages?source_queue=orders&q="+url.QueryEscape("quokka ledger"))
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Equal(t, 1, strings.Count(r.text, `data-test="message-row"`), "within its queue, the whole body is read")
	help = elementWords(r.text, "search-help")
	require.Len(t, help, 1)
	require.Contains(t, help[0], "Searches queue orders")
	require.Contains(t, help[0], "any part of each whole body")

	viewer := b.signIn(t, tokViewer)
	r = viewer.get(t, "/ui/messages?source_queue=orders&q="+url.QueryEscape("quokka ledger"))
	require.Contains(t, elementWords(r.text, "search-help")[0], "Bodies are not searched: this token may not see them")
}

// TestReplaysListRequestAndApprovalTimes: on the replays list, a replay
// carried out on approval shows under its requester when the request was
// made, and the approval's time with its approver. Before, the only time
// shown, under the requester, was the approval's (the task's creation).
func TestReplaysListRequestAndApprovalTimes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 1 })
	ids := b.seed(t, many(2, "orders")...)
	ctx := context.Background()
	op := ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole}
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	_, err := b.ops.StartReplay(ctx, op, ops.ReplayRequest{Request: replay.Request{IDs: ids}})
	var pa *ops.PendingApproval
	require.True(t, errors.As(err, &pa), "an approval request: %v", err)
	// Asked two hours before it is approved.
	_, err = b.db.Exec(ctx, `UPDATE approvals SET created_at = now() - interval '2 hours' WHERE id = $1`, pa.Approval.ID)
	require.NoError(t, err)
	_, err = b.ops.Approve(ctx, admin, pa.Approval.ID)
	require.NoError(t, err)

	direct, err := b.ops.StartReplay(ctx, admin, ops.ReplayRequest{Request: replay.Request{IDs: ids[:1]}})
	require.NoError(t, err)

	r := b.signIn(t, tokViewer).get(t, "/ui/replays")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	rows := strings.Split(r.text, `data-test="replay-row"`)[1:]
	require.Len(t, rows, 2)
	approved, plain := rows[1], rows[0] // newest first
	require.Contains(t, plain, `data-id="`+strconv.FormatInt(direct.ID, 10)+`"`)
	require.Equal(t, []string{"(2 h ago)"}, agoOf(elementWords(approved, "replay-requested-at")), "the request's time under the requester")
	at := elementWords(approved, "replay-approved-at")
	require.Len(t, at, 1)
	require.Contains(t, at[0], "approved by admin")
	require.Contains(t, at[0], "(just now)", "the approval's time with the approver")
	require.Equal(t, []string{"(just now)"}, agoOf(elementWords(plain, "replay-requested-at")), "a replay without approval: when it was asked")
	require.Empty(t, elementWords(plain, "replay-approved-at"))
}

var agoRe = regexp.MustCompile(`\([^)]*\)$`)

// agoOf keeps the "(… ago)" of each time's words.
func agoOf(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = agoRe.FindString(w)
	}
	return out
}

// TestEditSendSaysWhereTheCopyIs: after "Send this copy", the original's
// page says in words where the copy is ("being sent", not the state's
// name in_progress) and, while it is, refreshes itself; its refreshes
// (the page's live parts) then show the copy sent and the original
// replayed.
func TestEditSendSaysWhereTheCopyIs(t *testing.T) {
	t.Parallel()
	send := func(t *testing.T, b *bundle, c *client, id string) response {
		t.Helper()
		r := c.act(t, "/ui/messages/"+id+"/edit", url.Values{"binary": {"0"}, "body": {`{"sku":"B"}`}, "send": {"1"}})
		require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
		return c.follow(t, r)
	}
	t.Run("waiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t) // no replay runner: the copy's task waits
		ids := b.seed(t, msg{queue: "orders", body: []byte(`{"sku":"A"}`)})
		id := strconv.FormatInt(ids[0], 10)
		r := send(t, b, b.signIn(t, tokOp), id)
		require.Equal(t, []string{"being sent"}, elementWords(r.text, "edit-state"))
		require.NotContains(t, r.text, "in_progress)")
		status := elementWords(r.text, "message-status")
		require.Len(t, status, 1)
		require.Contains(t, status[0], "pending its corrected copy is being sent: this page follows it")
		require.Contains(t, r.text, `data-refresh-url="/ui/messages/`+id+`" data-live="on"`, "the page refreshes itself while the copy is on its way")
		require.NotContains(t, b.signIn(t, tokOp).get(t, "/ui/messages/"+strconv.FormatInt(b.seed(t, msg{queue: "orders"})[0], 10)).text,
			"data-refresh-url", "a message going nowhere is not refreshed")
	})
	// Acknowledged (here by a bulk acknowledge by filter; one by id is the
	// same ops.Acknowledge) before the copy's task took it: the task will
	// skip it, so the page does not say the copy is being sent.
	t.Run("acknowledged while waiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t) // no replay runner: the copy's task waits
		queue := dlqtest.Name(t, "ack")
		ids := b.seed(t, msg{queue: queue, body: []byte(`{"sku":"A"}`)})
		id := strconv.FormatInt(ids[0], 10)
		c := b.signIn(t, tokOp)
		send(t, b, c, id)
		r := c.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_source_queue": {queue},
			"max_id": {id}, "back": {"/ui/messages"}})
		require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
		page := c.get(t, "/ui/messages/"+id)
		require.Equal(t, []string{"will not be sent: the message was acknowledged before its task took it"}, elementWords(page.text, "edit-state"))
		status := elementWords(page.text, "message-status")
		require.Len(t, status, 1)
		require.NotContains(t, status[0], "is being sent")
		require.Contains(t, status[0], "acknowledged its corrected copy will not be sent (its task skips a message no longer pending): this page follows it")
	})
	t.Run("sent", func(t *testing.T) {
		t.Parallel()
		q, _ := sourceQueue(t)
		b := setup(t, func(o *setupOpts) { o.live = true })
		ids := b.seed(t, msg{queue: q, body: []byte(`{"sku":"A"}`)})
		id := strconv.FormatInt(ids[0], 10)
		c := b.signIn(t, tokOp)
		send(t, b, c, id)
		var last response
		dlqtest.Eventually(t, 20*time.Second, func() bool {
			req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/ui/messages/"+id, nil)
			require.NoError(t, err)
			req.Header.Set("X-DLQ-Refresh", "1")
			last = c.do(t, req)
			state, status := elementWords(last.text, "edit-state"), elementWords(last.text, "message-status")
			return len(state) == 1 && state[0] == "sent" && len(status) == 1 && status[0] == store.StatusReplayed
		}, "the page's refresh shows the copy sent and the original replayed")
		require.Contains(t, last.text, `id="message-status" data-test="message-status" data-refresh`)
	})
}

// TestOneNameForAGroupWithoutFailureType: a group whose messages carry
// no failure type has one name on the overview, the failure groups page,
// its own page and the confirmation of an action on it. Two such groups
// of the overview's largest, in two queues, show their reason too.
func TestOneNameForAGroupWithoutFailureType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, msg{queue: "bare-a", reason: "expired"}, msg{queue: "bare-b", reason: "maxlen"})
	admin := b.signIn(t, tokAdmin)
	gs, err := b.ops.Groups(context.Background(), ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole},
		store.GroupQuery{SourceQueue: "bare-a"})
	require.NoError(t, err)
	require.Len(t, gs, 1)
	r := admin.confirmPage(t, url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_group": {gs[0].ID}, "f_status": {"pending"}, "back": {"/ui/groups"}})
	require.Contains(t, words(r.text), "“(no failure type)”", "the confirmation names the group as the pages do")
	require.NotContains(t, words(r.text), "(no failure text)")
	for _, page := range []string{"/ui/groups", "/ui/groups/" + gs[0].ID} {
		r = admin.get(t, page)
		require.Contains(t, words(r.text), "(no failure type)", page)
		require.NotContains(t, words(r.text), "(no failure text)", page)
	}
	r = admin.get(t, "/ui/")
	require.Equal(t, 2, strings.Count(words(r.text), "(no failure type)"))
	require.Equal(t, []string{"expired", "maxlen"}, sortedCopy(elementWords(r.text, "group-reason")), "two groups apart only by queue show their reason")
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// TestJobsHolderBetweenRuns: a job whose lease expired after its run
// ended is idle, not "expired"; a job running holds its lease; only a run
// marked running whose lease expired is shown as a problem.
func TestJobsHolderBetweenRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	begin := func(job string) store.JobRunStart {
		t.Helper()
		run, ok, err := b.st.BeginJobRun(ctx, job, "inst-"+job, time.Now().UTC().Truncate(time.Millisecond), time.Hour)
		require.NoError(t, err)
		require.True(t, ok)
		return run
	}
	expire := func(job string) {
		t.Helper()
		_, err := b.db.Exec(ctx, `UPDATE job_leases SET expires_at = now() - interval '1 minute' WHERE job = $1`, job)
		require.NoError(t, err)
	}
	done := begin("summary")
	require.NoError(t, b.st.FinishJobRun(ctx, done.RunID, store.JobSuccess, 0, nil))
	expire("summary")
	held := begin("cleanup")
	require.NoError(t, b.st.FinishJobRun(ctx, held.RunID, store.JobSuccess, 0, nil))
	begin("capacity")
	begin("alerts")
	expire("alerts")

	r := b.signIn(t, tokViewer).get(t, "/ui/jobs")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	holder := map[string]string{}
	for _, row := range strings.Split(r.text, "<tr><th scope=\"row\">")[1:] {
		name := row[:strings.Index(row, "<")]
		if ws := elementWords(row, "job-holder"); len(ws) > 0 {
			holder[name] = ws[0]
		}
	}
	require.Equal(t, "idle; last run by inst-summary (token 1)", holder["summary"])
	require.Regexp(t, `^idle; last run by inst-cleanup \(token 1\), which holds the job until .*\(in (\d+ min|1 h)\)$`, holder["cleanup"])
	require.Regexp(t, `^running on inst-capacity \(token 1\), its lease until `, holder["capacity"])
	require.Regexp(t, `^stalled a run on inst-alerts \(token 1\) is marked running, but its lease expired `, holder["alerts"])
	require.NotContains(t, words(r.text), "expired,", "no job reads as merely expired")
	require.Equal(t, 1, strings.Count(r.text, `data-state="stalled"`), "one problem: the run left running")
}

// TestMessagePageTimestamps: a timestamp header, the timestamp property
// and the times inside x-death are shown in the console's one format,
// not as the RFC 3339 text they are stored as.
func TestMessagePageTimestamps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, msg{queue: "orders",
		headers: `{"sent-at":{"type":"timestamp","value":"2026-01-02T03:04:05Z"},` +
			`"x-death":[{"count":{"type":"int64","value":1},"queue":"orders","reason":"rejected","time":{"type":"timestamp","value":"2026-01-02T03:04:06Z"}}]}`,
		properties: `{"content_type":"application/json","timestamp":"2026-01-02T03:04:07Z"}`})
	r := b.signIn(t, tokOp).get(t, "/ui/messages/"+strconv.FormatInt(ids[0], 10))
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	page := words(r.text)
	require.Regexp(t, `sent-at timestamp 2026-01-02 03:04:05 UTC \(\d+ days? ago\)`, page)
	require.Contains(t, page, `"time":{"type":"timestamp","value":"2026-01-02 03:04:06 UTC"}`, "x-death's time")
	require.Regexp(t, `timestamp timestamp 2026-01-02 03:04:07 UTC \(\d+ days? ago\)`, page, "the timestamp property")
	for _, raw := range []string{"2026-01-02T03:04:05Z", "2026-01-02T03:04:06Z", "2026-01-02T03:04:07Z"} {
		require.NotContains(t, page, raw, "shown as stored")
	}
}
